"""The models ``kiln train`` knows, by name, and the blocks only they use.

``build_model(name, in_shape, classes)`` builds one; ``MODELS`` lists the
classifiers' names and ``IMAGE_MODELS`` those that read images (N, C, H, W)
rather than flat rows; ``TEXT_MODELS`` the language models
(``nn/language_model.py``), whose ``in_shape`` is ``(seq_len,)`` and
``classes`` the vocabulary's size. Checkpoints store the name and rebuild
the model from it.
"""
from __future__ import annotations

import numpy as np

from ..errors import AttrError
from . import modules as M

MODELS = ("mlp", "mlp-residual", "cnn", "resnet")
IMAGE_MODELS = ("cnn", "resnet")
TEXT_MODELS = ("transformer", "lstm")


class BasicBlock(M.Module):
    """ResNet's basic block: ``relu(body(x) + shortcut(x))``.

    ``body`` is conv 3x3 (``stride``) - BatchNorm - ReLU - conv 3x3 -
    BatchNorm; ``shortcut`` is the identity, or a 1x1 conv (``stride``) and
    BatchNorm where the block changes the channels or the size. The convs have
    no bias: the BatchNorm after each would cancel it.

    Shapes: (N, in_channels, H, W) -> (N, out_channels, ceil(H / stride), ceil(W / stride)).
    """

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1):
        self.body = M.Sequential(M.Conv(in_channels, out_channels, 3, stride=stride, bias=False),
                                 M.BatchNorm2d(out_channels), M.ReLU(),
                                 M.Conv(out_channels, out_channels, 3, bias=False), M.BatchNorm2d(out_channels))
        self.shortcut = (M.Identity() if stride == 1 and in_channels == out_channels else
                         M.Sequential(M.Conv(in_channels, out_channels, 1, stride=stride, bias=False),
                                      M.BatchNorm2d(out_channels)))
        self.relu = M.ReLU()

    def forward(self, x):
        return self.relu(self.body(x) + self.shortcut(x))


def resnet(channels: int, classes: int, width: int = 16) -> M.Sequential:
    """A small ResNet for small images (8x8 digits): a conv-BN-ReLU stem of
    ``width`` channels, one basic block at that width, one that doubles it and
    halves the size (projection shortcut), global average pooling, a linear
    classifier. (N, channels, H, W) -> (N, classes)."""
    return M.Sequential(M.Conv(channels, width, 3, bias=False), M.BatchNorm2d(width), M.ReLU(),
                        BasicBlock(width, width), BasicBlock(width, 2 * width, stride=2),
                        M.GlobalAvgPool2d(), M.Linear(2 * width, classes))


def build_model(name: str, in_shape: tuple, classes: int, hidden: int = 128) -> M.Module:
    """A model from the zoo for inputs of ``in_shape`` (without the batch dim);
    the models in ``IMAGE_MODELS`` take ``(channels, height, width)``."""
    if name == "mlp":
        return M.Sequential(M.Flatten(), M.Linear(int(np.prod(in_shape)), hidden), M.ReLU(), M.Linear(hidden, classes))
    if name == "mlp-residual":
        return M.Sequential(M.Flatten(), M.Linear(int(np.prod(in_shape)), hidden), M.ReLU(),
                            M.Residual(M.Sequential(M.Linear(hidden, hidden), M.ReLU())), M.Linear(hidden, classes))
    if name in TEXT_MODELS:
        from .language_model import build_language_model

        if len(in_shape) != 1:
            raise AttrError(f"got input shape {tuple(in_shape)}, expected (seq_len,) for {name!r}",
                            where="build_model", arg="in_shape")
        return build_language_model(name, classes, max_len=in_shape[0])
    if name in IMAGE_MODELS and len(in_shape) != 3:
        raise AttrError(f"got input shape {tuple(in_shape)}, expected (channels, height, width) for {name!r}",
                        where="build_model", arg="in_shape")
    if name == "cnn":
        channels = in_shape[0]
        return M.Sequential(M.Conv(channels, 16, 3), M.BatchNorm2d(16), M.ReLU(), M.Conv(16, 32, 3),
                            M.BatchNorm2d(32), M.ReLU(), M.GlobalAvgPool2d(), M.Linear(32, classes))
    if name == "resnet":
        return resnet(in_shape[0], classes)
    raise AttrError(f"got {name!r}, expected one of {', '.join(MODELS + TEXT_MODELS)}", where="build_model",
                    arg="model")
