"""Image layers over NCHW tensors: convolution and pooling, with PyTorch's
``Conv2d``/``MaxPool2d``/``AvgPool2d`` arguments, so that a model ported
by hand keeps its layer definitions (and its ``state_dict``: the weights
are OIHW in both)."""
from __future__ import annotations

from ..errors import AttrError
from ..te import attrs as A
from ..te import call
from . import functional as F
from . import init
from .module import Module, Parameter

PADDING_MODES = ("zeros", "reflect", "replicate", "circular")  # PyTorch's; kiln pads with zeros only


class Conv(Module):
    """2-D convolution of (N, C, H, W) images, with PyTorch's ``Conv2d`` arguments.

    Unlike PyTorch's, the default ``padding`` is needle's "half the kernel on
    each side" (kiln's only padding before the other forms): a port of
    ``torch.nn.Conv2d(c, o, 3)`` passes ``padding=0``.

    Parameters
    ----------
    in_channels, out_channels : int
        C and O; both divisible by ``groups``.
    kernel_size : int or (int, int)
        (KH, KW).
    stride : int or (int, int), default 1
    padding : int, (int, int), 'same', 'valid' or None
        Zeros on both sides of H and W, as in PyTorch (see
        ``functional.conv2d``). None (the default): ``(span + 1) // 2`` on
        each side, ``span = dilation * (kernel - 1)``, which is
        ``kernel // 2`` without dilation: H and W are kept at stride 1 for
        odd kernels.
    dilation : int or (int, int), default 1
        The spacing of the kernel's taps.
    groups : int, default 1
        Channel groups (depthwise: ``groups == in_channels``).
    bias : bool, default True
        Whether the layer adds a learned bias (O,).
    padding_mode : str, default 'zeros'
        'zeros' only; PyTorch's others raise.
    dtype : str, default 'float32'

    Attributes
    ----------
    weight : Parameter
        (O, C / groups, KH, KW), PyTorch's layout.
    bias : Parameter or None
        (O,).
    padding : (int, int) or str
        The ``padding`` given, as a pair unless a string (PyTorch's
        convention); None is resolved to its pair.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=None, dilation=1,
                 groups: int = 1, bias: bool = True, padding_mode: str = "zeros", dtype="float32"):
        self.in_channels = A.positive_int("Conv", "in_channels", in_channels)
        self.out_channels = A.positive_int("Conv", "out_channels", out_channels)
        self.kernel_size = A.int_tuple(2, minimum=1)("Conv", "kernel_size", kernel_size)
        self.stride = A.int_tuple(2, minimum=1)("Conv", "stride", stride)
        self.dilation = A.int_tuple(2, minimum=1)("Conv", "dilation", dilation)
        self.groups = A.positive_int("Conv", "groups", groups)
        if in_channels % groups or out_channels % groups:
            raise AttrError(f"got {groups}, expected a divisor of both in_channels ({in_channels}) and "
                            f"out_channels ({out_channels})", where="Conv", arg="groups")
        if padding_mode != "zeros":
            expected = "'zeros' (kiln's conv pads with zeros only)" if padding_mode in PADDING_MODES \
                else f"one of PyTorch's {', '.join(map(repr, PADDING_MODES))}, and kiln supports 'zeros' only"
            raise AttrError(f"got {padding_mode!r}, expected {expected}", where="Conv", arg="padding_mode")
        self.padding_mode = padding_mode
        if padding is None:
            padding = tuple((d * (k - 1) + 1) // 2 for d, k in zip(self.dilation, self.kernel_size))
        F._conv_pads("Conv", padding, self.kernel_size, self.stride, self.dilation)  # refuse a bad one now
        self.padding = padding if isinstance(padding, str) else A.int_tuple(2)("Conv", "padding", padding)
        kh, kw = self.kernel_size
        fan_in, fan_out = in_channels // groups * kh * kw, out_channels * kh * kw
        self.weight = Parameter(init.kaiming_uniform(fan_in, fan_out, dtype=dtype, shape=(
            out_channels, in_channels // groups, kh, kw)))
        bound = 1.0 / fan_in ** 0.5
        self.bias = Parameter(init.rand(out_channels, low=-bound, high=bound, dtype=dtype)) if bias else None

    def forward(self, x):
        """(N, C, H, W) -> (N, O, OH, OW)."""
        return F.conv2d(x, self.weight, self.bias, stride=self.stride, padding=self.padding,
                        dilation=self.dilation, groups=self.groups)


class MaxPool2d(Module):
    """Max pooling of (N, C, H, W) images, with PyTorch's ``MaxPool2d`` arguments.

    Parameters
    ----------
    kernel_size : int or (int, int)
    stride : int or (int, int), optional
        The kernel by default.
    padding, dilation : int or (int, int)
    ceil_mode : bool, default False
    return_indices : bool
        False only.

    See ``functional.max_pool2d``.
    """

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices: bool = False,
                 ceil_mode: bool = False):
        self.kernel_size, self.stride, self.padding, self.dilation = kernel_size, stride, padding, dilation
        self.return_indices, self.ceil_mode = return_indices, ceil_mode

    def forward(self, x):
        """(N, C, H, W) -> (N, C, OH, OW)."""
        return F.max_pool2d(x, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode,
                            self.return_indices)


class AvgPool2d(Module):
    """Average pooling of (N, C, H, W) images, with PyTorch's ``AvgPool2d`` arguments.

    Parameters
    ----------
    kernel_size : int or (int, int)
    stride : int or (int, int), optional
        The kernel by default.
    padding : int or (int, int)
    ceil_mode : bool, default False
    count_include_pad : bool, default True
        Whether the padding counts in each mean (PyTorch's default).
    divisor_override : None
        None only.

    See ``functional.avg_pool2d``.
    """

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False, count_include_pad: bool = True,
                 divisor_override=None):
        self.kernel_size, self.stride, self.padding, self.ceil_mode = kernel_size, stride, padding, ceil_mode
        self.count_include_pad, self.divisor_override = count_include_pad, divisor_override

    def forward(self, x):
        """(N, C, H, W) -> (N, C, OH, OW)."""
        return F.avg_pool2d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad,
                            self.divisor_override)


class GlobalAvgPool2d(Module):
    """(N, C, H, W) -> (N, C): the mean over each channel's plane
    (PyTorch's ``AdaptiveAvgPool2d(1)`` followed by ``Flatten``)."""

    def forward(self, x):
        """(N, C, H, W) -> (N, C)."""
        return call("global_avg_pool2d", x).reshape(x.shape[0], x.shape[1])
