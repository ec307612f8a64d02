"""PyTorch twins of kiln models, with kiln's weights copied in.

The train and inference suites compare kiln with PyTorch (and ONNX Runtime,
through a model exported from the twin) on the same model: the twin is built
from the kiln model itself, layer by layer, so the two cannot drift apart,
and its outputs are checked against the exported kiln model's.
"""
from __future__ import annotations

import numpy as np

from ..errors import KilnError
from ..nn import modules as M


def _layers(model: M.Module) -> list[M.Module]:
    return model.modules if isinstance(model, M.Sequential) else [model]


def _copy(param, value) -> None:
    import torch

    with torch.no_grad():
        param.copy_(torch.from_numpy(np.ascontiguousarray(value)))


def torch_twin(model: M.Module):
    """A ``torch.nn.Sequential`` computing what ``model`` computes, with its weights.

    Handles the layers of kiln's zoo: Linear (kiln's weight is (in, out),
    PyTorch's (out, in)), Conv (same padding), BatchNorm2d (parameters and
    running statistics), ReLU, Flatten, GlobalAvgPool2d, nested Sequential.
    """
    import torch

    out = []
    for layer in _layers(model):
        if isinstance(layer, M.Sequential):
            out.append(torch_twin(layer))
        elif isinstance(layer, M.Linear):
            t = torch.nn.Linear(layer.in_features, layer.out_features, bias=layer.bias is not None)
            _copy(t.weight, layer.weight.numpy().T)
            if layer.bias is not None:
                _copy(t.bias, layer.bias.numpy())
            out.append(t)
        elif isinstance(layer, M.Conv):
            t = torch.nn.Conv2d(layer.in_channels, layer.out_channels, layer.kernel_size, stride=layer.stride,
                                padding=layer.padding, bias=layer.bias is not None)
            _copy(t.weight, layer.weight.numpy())
            if layer.bias is not None:
                _copy(t.bias, layer.bias.numpy())
            out.append(t)
        elif isinstance(layer, M.BatchNorm2d):
            t = torch.nn.BatchNorm2d(layer.dim, eps=layer.eps, momentum=layer.momentum)
            for name in ("weight", "bias", "running_mean", "running_var"):
                _copy(getattr(t, name), getattr(layer, name).numpy())
            out.append(t)
        elif isinstance(layer, M.ReLU):
            out.append(torch.nn.ReLU())
        elif isinstance(layer, M.Flatten):
            out.append(torch.nn.Flatten())
        elif isinstance(layer, M.GlobalAvgPool2d):
            out.extend([torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten()])
        else:
            raise KilnError(f"no PyTorch twin for a {type(layer).__name__} layer", arg="model")
    return torch.nn.Sequential(*out)
