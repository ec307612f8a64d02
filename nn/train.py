"""Training loops (needle's ``epoch`` / ``train``); labels are checked against
the model's classes before the first step. The models ``kiln train`` knows are
in ``nn/zoo.py`` (``build_model`` and ``MODELS`` are importable from here too),
checkpoints in ``nn/checkpoint.py``."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from . import modules as M
from .data import check_labels
from .compiled import Compiled
from .tensor import Tensor, no_grad
from .zoo import MODELS, build_model  # noqa: F401  (kiln.nn.train.build_model is public API)


@dataclass
class EpochStats:
    epoch: int
    train_loss: float
    train_error: float
    test_loss: float
    test_error: float
    seconds: float

    HEADER = (f"{'epoch':>5} | {'train loss':>10} | {'train err':>9} | {'test loss':>9} | {'test err':>8} | "
              f"{'time':>6}\n" + "-" * 64)

    def row(self) -> str:
        """This epoch's line of the table under ``HEADER``."""
        return (f"{self.epoch:>5} | {self.train_loss:>10.4f} | {self.train_error:>9.4f} | {self.test_loss:>9.4f} | "
                f"{self.test_error:>8.4f} | {self.seconds:>5.1f}s")


@dataclass
class History:
    epochs: list = field(default_factory=list)

    def table(self) -> str:
        return "\n".join([EpochStats.HEADER, *(e.row() for e in self.epochs)])


def dataset_labels(dataset):
    """The labels of a dataset that holds them as an array (``NDArrayDataset(x, y)``),
    else None: reading them from a generic dataset would run its transforms."""
    arrays = getattr(dataset, "arrays", None)
    return arrays[1] if isinstance(arrays, (tuple, list)) and len(arrays) >= 2 else None


def compiled_step(model, loss_fn, optimizer) -> Compiled:
    """One training step of ``model`` as a compiled function: ``step(x, y)``
    runs forward, loss, backward and ``optimizer``'s update as one module
    call and returns ``(loss, logits)``."""
    def train_step(x, y):
        logits = model(x)
        return loss_fn(logits, y), logits
    return Compiled(train_step, optimizer)


def run_epoch(model, loader, loss_fn, optimizer=None, progress=None, classes: int | None = None,
              on_batch: Callable[[], None] | None = None, step: Compiled | None = None) -> tuple[float, float]:
    """One pass over ``loader``: (mean loss, error rate); trains when an optimizer is given.

    ``classes`` checks each batch's labels (``data.check_labels``); ``on_batch()``
    is called after every batch, between steps (a safe point to stop). Every
    op of a step (the model's layers, the loss, the update) takes its kernel
    from the model's ``kernel_pool``: the run's kernels are the model's.
    ``step`` (``compiled_step``) trains the batches of the loader's batch
    size; a smaller last batch trains eagerly rather than compiling again."""
    model.train(optimizer is not None)
    total_loss, wrong, seen = 0.0, 0, 0
    with model.kernel_pool.activate():
        for x, y in loader:
            if classes is not None:
                check_labels(y, classes, "train")
            xs, ys = Tensor(x), Tensor(np.asarray(y, dtype="int32"))
            if step is not None and optimizer is not None and len(y) == loader.batch_size:
                loss, logits = step(xs, ys)
            elif optimizer is not None:
                optimizer.zero_grad()
                logits = model(xs)
                loss = loss_fn(logits, ys)
                loss.backward()
                optimizer.step()
            else:
                with no_grad():
                    logits = model(xs)
                    loss = loss_fn(logits, ys)
            n = int(np.size(y))  # predictions: one per sample, or per position of a sequence
            total_loss += loss.item() * n
            wrong += int(np.sum(logits.numpy().argmax(axis=-1) != np.asarray(y)))
            seen += n
            if progress is not None:
                progress.update(1)
            if on_batch is not None:
                on_batch()
    return total_loss / max(seen, 1), wrong / max(seen, 1)


def fit(model, train_loader, test_loader, optimizer, epochs: int, loss_fn=None, progress_factory=None,
        on_epoch=None, classes: int | None = None, on_batch: Callable[[], None] | None = None,
        compiled: bool = True) -> History:
    """Train for ``epochs``, evaluating on ``test_loader`` after each; the model ends in eval mode.

    Parameters
    ----------
    classes : int, optional
        The model's class count: labels outside ``[0, classes)`` are refused
        before the first step (whole datasets that hold their labels as an
        array) or at the batch that carries them (other datasets).
    on_epoch : callable, optional
        ``on_epoch(EpochStats)`` as each epoch ends (e.g. to print its row).
    on_batch : callable, optional
        Called after every batch; an exception it raises (``KeyboardInterrupt``
        for a requested stop) ends training between two steps.
    compiled : bool
        Train with one compiled module call per step (``kiln.compile``; the
        first step of a batch shape runs eagerly and compiles it), else
        eagerly, one kernel launch per op.
    """
    if classes is not None:
        for name, loader in (("training", train_loader), ("test", test_loader)):
            labels = dataset_labels(getattr(loader, "dataset", None))
            if labels is not None:
                check_labels(labels, classes, f"train ({name} set)")
    loss_fn = loss_fn or M.SoftmaxLoss()
    step = compiled_step(model, loss_fn, optimizer) if compiled else None
    history = History()
    for epoch in range(1, epochs + 1):
        start = time.perf_counter()
        bar = progress_factory(epoch, len(train_loader)) if progress_factory else None
        try:
            train_loss, train_err = run_epoch(model, train_loader, loss_fn, optimizer, bar, classes, on_batch, step)
        finally:
            if bar is not None:
                bar.close()
        test_loss, test_err = run_epoch(model, test_loader, loss_fn, classes=classes, on_batch=on_batch)
        stats = EpochStats(epoch, train_loss, train_err, test_loss, test_err, time.perf_counter() - start)
        history.epochs.append(stats)
        if on_epoch:
            on_epoch(stats)
    model.eval()
    return history
