"""Task extraction: the distinct kernel workloads a model runs, with their call counts.

``extract(model, example)`` reads the graph ``kiln.export`` compiles —
traced, with eval BatchNorm folded, epilogues fused, weights pre-packed and
layouts blocked — at the example's batch size; ``training=True`` reads the
graph ``kiln.compile`` makes of one training step (forward, loss, backward
and the optimizer's fused updates). Each kernel is tuned as its node's own op
(a fused epilogue rides along in the kernel, but the anchor op's knobs are
the ones searched), so a workload that several kernels share is one task,
called that many times per inference or step.

The tuned records then serve those exact kernels: ``kiln export`` gives the
tuned batch size an entry of its own (``export(batches=...)``), and a
compiled training step of static shapes takes them as it is built.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import AttrError, ShapeError
from ..graph.entries import entry_configure, settle, static_config
from ..graph.lower import kernel_nodes, node_workload
from ..runtime.device import as_target
from .task import Task


@dataclass(frozen=True)
class ModelTask:
    """A tuning task of a model: ``calls`` kernels of its workload run per
    inference or training step; ``kernels`` names them (op and fused
    epilogue); ``baseline`` is the config the model runs without tuning (the
    export's entry for that batch, or a step's threads by work), which
    tuning measures first and is compared against."""

    task: Task
    calls: int
    kernels: tuple
    baseline: dict = None

    @property
    def name(self) -> str:
        return self.task.name


def extract(model, example, training: bool = False, target=None, optimizer=None, loss_fn=None,
            labels=None) -> list[ModelTask]:
    """The distinct kernel workloads of ``model`` on batches like ``example``.

    Parameters
    ----------
    model : kiln.nn.Module (or any callable made of kiln ops)
    example : array-like, or dict of them by input name
        An input batch (a dict for a model of several inputs, inference
        only); its batch size is the one tuned.
    training : bool
        Extract one training step's kernels instead of an inference's.
    optimizer, loss_fn, labels : optional
        With ``training``, the step's optimizer (default
        ``Adam(model.parameters())``, as ``kiln train``), loss (default
        ``SoftmaxLoss``) and labels (default zeros). The model's parameters,
        buffers and the optimizer's state are left as they were.

    Returns
    -------
    list of ModelTask
        The tasks, the most called first (then in graph order).
    """
    if isinstance(example, dict) and not training:  # several inputs by name (an imported model's)
        batch = {np.asarray(v).shape[0] if np.ndim(v) else 0 for v in example.values()}
    else:
        example = np.asarray(example.numpy() if hasattr(example, "numpy") else example)
        batch = {example.shape[0] if example.ndim else 0}
    if len(batch) != 1 or min(batch) < 1:
        raise ShapeError("expected a batch of at least one (one batch size for every input)", where="extract",
                         arg="example")
    batch = batch.pop()
    target = as_target(target)
    if training:
        graph = _training_graph(model, example, target, optimizer, loss_fn, labels)
        configure = static_config
    else:
        from ..graph.export import inference_graph

        graph = inference_graph(model, example, target).specialized(batch)
        configure = entry_configure(batch)
    found: dict[str, tuple] = {}
    for node in kernel_nodes(graph):
        workload = node_workload(node)
        if not node.epilogue and _moves_no_data(workload):
            continue
        task, calls, names = found.get(workload.key, (None, 0, ()))
        found[workload.key] = (task or Task.of(workload, target), calls + 1, names + (node.name,))
    order = sorted(enumerate(found.values()), key=lambda item: (-item[1][1], item[0]))
    return [ModelTask(task, calls, names, settle(task.workload, configure, task.lower)[1])
            for _, (task, calls, names) in order]


def _moves_no_data(workload) -> bool:
    """Whether the workload only reinterprets its input's memory (a layout
    change that is a reshape, such as a channel-blocked 1x1 map): the
    compiler turns its kernel into a view, so there is nothing to tune."""
    from tvm import relax, te

    from ..runtime.lower import declare

    inputs, outs = declare(workload)
    return len(inputs) == 1 and bool(relax.analysis.has_reshape_pattern(te.create_prim_func(inputs + outs)))


def _training_graph(model, example, target, optimizer, loss_fn, labels):
    from ..nn import Tensor, optim
    from ..nn.compiled import Compiled
    from ..nn.modules import SoftmaxLoss

    if not hasattr(model, "parameters"):
        raise AttrError(f"got {type(model).__name__}, expected a kiln.nn.Module to train", where="extract",
                        arg="model")
    optimizer = optimizer or optim.Adam(model.parameters())
    loss_fn = loss_fn or SoftmaxLoss()
    labels = np.zeros(example.shape[0], "int32") if labels is None else np.asarray(labels)
    saved = model.state_dict()
    kept = _optimizer_state(optimizer)
    was_training = model.training
    model.train()
    try:
        step = Compiled(lambda x, y: loss_fn(model(x), y), optimizer, target)
        return step.graph(Tensor(example), Tensor(labels))
    finally:
        model.load_state_dict(saved)
        _restore_optimizer(optimizer, kept)
        if not was_training:
            model.eval()


def _optimizer_state(optimizer) -> dict:
    """Copies of the optimizer's buffers (its dicts of Tensors: momentum,
    Adam's moments) and its other plain attributes (the step count)."""
    from ..nn import Tensor

    kept = {}
    for name, value in vars(optimizer).items():
        if isinstance(value, dict) and all(isinstance(t, Tensor) for t in value.values()):
            kept[name] = {k: t.numpy().copy() for k, t in value.items()}
        elif isinstance(value, (int, float)):
            kept[name] = value
    return kept


def _restore_optimizer(optimizer, kept: dict) -> None:
    from ..nn import Tensor

    for name, value in kept.items():
        if not isinstance(value, dict):
            setattr(optimizer, name, value)
            continue
        buffers = getattr(optimizer, name)
        for key in list(buffers):
            if key in value:
                buffers[key].data = Tensor(value[key]).data  # in place of the step's update, same Tensor
            else:
                del buffers[key]  # made by the traced step
