"""PyTorch twins of kiln models, with kiln's weights copied in, and ONNX Runtime sessions on them.

The train and inference suites compare kiln with PyTorch (and ONNX Runtime,
through a model exported from the twin) on the same model: the twin is built
from the kiln model itself, layer by layer, so the two cannot drift apart,
and its outputs are checked against the exported kiln model's.
"""
from __future__ import annotations

import importlib.util
import os
import warnings

import numpy as np

from ..errors import KilnError
from ..nn import modules as M
from ..nn.zoo import BasicBlock


def _copied(t, **values):
    """``t`` with each named parameter or buffer set to a kiln Tensor's or an
    array's value (a None value: ``t`` has no such parameter)."""
    import torch

    with torch.no_grad():
        for name, value in values.items():
            if value is not None:
                array = value.numpy() if hasattr(value, "numpy") else value
                getattr(t, name).copy_(torch.from_numpy(np.ascontiguousarray(array)))
    return t


def _block_twin(block: BasicBlock):
    """The twin of a ResNet basic block: ``relu(body(x) + shortcut(x))``."""
    import torch

    class Block(torch.nn.Module):
        def __init__(self, body, shortcut):
            super().__init__()
            self.body, self.shortcut = body, shortcut

        def forward(self, x):
            return torch.relu(self.body(x) + self.shortcut(x))

    return Block(_twin(block.body), _twin(block.shortcut))


def _twin(layer: M.Module):
    """The PyTorch module computing what ``layer`` computes, with its weights."""
    import torch

    if isinstance(layer, M.Sequential):
        return torch.nn.Sequential(*(_twin(m) for m in layer.modules))
    if isinstance(layer, BasicBlock):
        return _block_twin(layer)
    if isinstance(layer, M.Linear):  # kiln's weight is (in, out), PyTorch's (out, in)
        return _copied(torch.nn.Linear(layer.in_features, layer.out_features, bias=layer.bias is not None),
                       weight=layer.weight.numpy().T, bias=layer.bias)
    if isinstance(layer, M.Conv):
        return _copied(torch.nn.Conv2d(layer.in_channels, layer.out_channels, layer.kernel_size, stride=layer.stride,
                                       padding=layer.padding, bias=layer.bias is not None),
                       weight=layer.weight, bias=layer.bias)
    if isinstance(layer, M.BatchNorm2d):
        return _copied(torch.nn.BatchNorm2d(layer.dim, eps=layer.eps, momentum=layer.momentum),
                       **{name: getattr(layer, name) for name in ("weight", "bias", "running_mean", "running_var")})
    if isinstance(layer, M.GlobalAvgPool2d):
        return torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten())
    simple = {M.ReLU: torch.nn.ReLU, M.Flatten: torch.nn.Flatten, M.Identity: torch.nn.Identity}
    if type(layer) not in simple:
        raise KilnError(f"no PyTorch twin for a {type(layer).__name__} layer", arg="model")
    return simple[type(layer)]()


def torch_twin(model: M.Module):
    """A ``torch.nn.Sequential`` computing what ``model`` computes, with its weights.

    Handles the layers of kiln's zoo: Linear (kiln's weight is (in, out),
    PyTorch's (out, in)), Conv (same padding), BatchNorm2d (parameters and
    running statistics), ReLU, Flatten, Identity, GlobalAvgPool2d, ResNet's
    BasicBlock, nested Sequential.
    """
    import torch

    twin = _twin(model)
    return twin if isinstance(twin, torch.nn.Sequential) else torch.nn.Sequential(twin)


def ort_session(twin, shape, folder, threads):
    """``(session, None)``: ONNX Runtime on ``twin`` exported to ONNX in
    ``folder`` (input ``x``: a batch of any size of ``shape``; ``threads``
    intra-op threads, one inter-op); ``(None, reason)`` when onnxruntime or
    onnx is not installed."""
    missing = [m for m in ("onnxruntime", "onnx") if importlib.util.find_spec(m) is None]
    if missing:
        return None, f"{' and '.join(missing)} not installed: no ONNX Runtime row"
    import onnxruntime as ort
    import torch

    path = os.path.join(folder, f"{id(twin)}.onnx")
    with warnings.catch_warnings():  # the TorchScript exporter is deprecated, and still the one that takes a Module
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(twin, torch.zeros((1,) + shape), path, input_names=["x"], dynamic_axes={"x": {0: "n"}},
                          dynamo=False)
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"]), None
