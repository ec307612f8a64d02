"""Quantized inference: quantize / dequantize, dense_int8 on packed int8
weights (K in blocks of 4 or with a tail, N in whole panels or not, one row
to a batch's worth), and conv2d_int8 (1x1, 3x3 and a 7x7 stem, strides 1 and
2, channels in blocks of 4 or with a tail, output channels past a panel,
NCHW or in channel blocks in and out, float or uint8 codes in), and
dequantize_add (a residual of uint8 or int8 codes), and matmul_int8 (two
uint8 operands with their zero points: batched or one matrix, K and N in whole
blocks or with tails, corrections of zero)."""
import numpy as np

from helpers import Case
from kiln.te.quantize import pack_int8_weight
from kiln.te.layout import blocked_array
from kiln.te.quantize_conv import pack_conv_int8_weight
from kiln.te.quantize_depthwise import pack_depthwise_int8_weight


def _floats_and_ties(rng, shapes, dtypes):
    x = rng.uniform(-40, 40, shapes[0]).astype(dtypes[0])
    x.flat[:4] = [0.25, 0.75, -0.25, 1e9]  # ties at scale 0.5 round to even; a value past the range saturates
    return [x]


def _codes(rng, shapes, dtypes):
    return [rng.integers(np.iinfo(dtypes[0]).min, np.iinfo(dtypes[0]).max + 1, shapes[0]).astype(dtypes[0])]


def _residual(rng, shapes, dtypes):
    return [rng.standard_normal(shapes[0]).astype(np.float32), _codes(rng, shapes[1:], dtypes[1:])[0]]


def _dense(rng, shapes, dtypes):
    (m, k), (panels, k4, bn, _), (n,), _ = shapes
    x = rng.integers(0, 256, (m, k)).astype(np.uint8)
    w = pack_int8_weight(rng.integers(-127, 128, (k, n)).astype(np.int8), bn)
    return [x, w, (rng.random(n) * 1e-3).astype(np.float32), rng.standard_normal(n).astype(np.float32)]


def _dense_case(m, k, n, bn=16, **attrs):
    shapes = [(m, k), (-(-n // bn), -(-k // 4), bn, 4), (n,), (n,)]
    return Case("dense_int8", shapes, ["uint8", "int8", "float32", "float32"], attrs=attrs, make=_dense, grad=False)


def _conv(rng, shapes, dtypes):
    x, (panels, kh, kw, c4, bn, _), (k,), _ = shapes
    c = x[1] if len(x) == 4 else 4 * c4  # a blocked input: C as the weight holds it, the last block padded
    w = pack_conv_int8_weight(rng.integers(-127, 128, (k, c, kh, kw)).astype(np.int8), bn)
    data = rng.standard_normal((x[0], c, x[2], x[3])).astype(np.float32) if dtypes[0] == "float32" else \
        rng.integers(0, 256, (x[0], c, x[2], x[3])).astype(np.uint8)  # uint8: the input's codes
    return [data if len(x) == 4 else blocked_array(data, x[4]), w, (rng.random(k) * 1e-3).astype(np.float32),
            rng.standard_normal(k).astype(np.float32)]


def _conv_case(x, k, kernel, bn=16, x_dtype="float32", **attrs):
    """``x`` NCHW; with ``in_block`` the case's input is its (N, ceil(C / in_block), H, W, in_block) blocks."""
    shapes = [x, (-(-k // bn), kernel, kernel, -(-x[1] // 4), bn, 4), (k,), (k,)]
    if attrs.get("in_block"):
        shapes[0] = (x[0], -(-x[1] // attrs["in_block"]), x[2], x[3], attrs["in_block"])
    attrs = {"in_scale": 0.02, "in_zero_point": 131, **attrs}
    return Case("conv2d_int8", shapes, [x_dtype, "int8", "float32", "float32"], attrs=attrs, make=_conv, grad=False)


def _depthwise(rng, shapes, dtypes):
    x, (blocks, _, kh, kw, oc), (c,), _ = shapes
    w = pack_depthwise_int8_weight(rng.integers(-127, 128, (c, 1, kh, kw)).astype(np.int8), oc)
    data = rng.standard_normal((x[0], c, x[-3 if len(x) == 5 else 2], x[-2 if len(x) == 5 else 3]))
    data = data.astype(np.float32) if dtypes[0] == "float32" else rng.integers(0, 256, data.shape).astype(np.uint8)
    return [data if len(x) == 4 else blocked_array(data, x[4]), w, (rng.random(c) * 1e-3).astype(np.float32),
            rng.standard_normal(c).astype(np.float32)]


def _depthwise_case(x, kernel, oc=16, x_dtype="float32", **attrs):
    """``x`` NCHW; with ``in_block`` the case's input is its (N, ceil(C / in_block), H, W, in_block) blocks."""
    c = x[1]
    shapes = [x, (-(-c // oc), 1, kernel, kernel, oc), (c,), (c,)]
    if attrs.get("in_block"):
        shapes[0] = (x[0], -(-c // attrs["in_block"]), x[2], x[3], attrs["in_block"])
    attrs = {"channels": c, "in_scale": 0.02, "in_zero_point": 131, **attrs}
    return Case("depthwise_conv2d_int8", shapes, [x_dtype, "int8", "float32", "float32"], attrs=attrs,
                make=_depthwise, grad=False)


def _matmul_int8(m, k, n, batch=(), **attrs):
    shapes = [(*batch, m, k), (*batch, k, n)]
    return Case("matmul_int8", shapes, ["uint8", "uint8"], attrs={"scale": 0.003, **attrs}, make=_all_codes, grad=False)


def _all_codes(rng, shapes, dtypes):
    return [rng.integers(0, 256, s).astype(np.uint8) for s in shapes]


CASES = [
    _matmul_int8(16, 64, 32, (2, 3), a_zero_point=131, b_zero_point=3),  # attention's shape, heads x batch
    _matmul_int8(5, 12, 20, a_zero_point=7, b_zero_point=255),  # one matrix, N past a panel
    _matmul_int8(4, 13, 33, (2,)),  # K with a tail of 1: int32 multiply-adds; both corrections 0
    _matmul_int8(7, 32, 16, (3,), b_zero_point=128),  # no row sums read
    Case("quantize", [(4, 33)], attrs={"scale": 0.5, "zero_point": 128}, make=_floats_and_ties, grad=False),
    Case("quantize", [(2, 3, 5)], "float64", attrs={"scale": 0.1, "zero_point": -3, "dtype": "int8"},
         make=_floats_and_ties, grad=False),
    # by the reciprocal of a scale that is no power of two (1 / 0.3 is inexact)
    Case("quantize", [(5, 37)], attrs={"scale": 0.3, "zero_point": 7, "reciprocal": True}, make=_floats_and_ties,
         grad=False),
    Case("dequantize", [(4, 33)], "uint8", attrs={"scale": 0.5, "zero_point": 128}, make=_codes, grad=False),
    Case("dequantize", [(7,)], "int8", attrs={"scale": 0.02, "zero_point": 5, "dtype": "int8"}, make=_codes,
         grad=False),
    _dense_case(64, 512, 256),
    _dense_case(5, 64, 40, relu=True),  # 5 rows, a panel and a half
    _dense_case(1, 100, 16),
    _dense_case(3, 30, 20),  # K in 7 blocks and a tail of 2
    _dense_case(12, 32, 24, bn=8),
    _conv_case((1, 8, 9, 9), 16, 3, padding=(1, 1)),
    _conv_case((2, 6, 10, 10), 20, 3, stride=(2, 2), padding=(1, 1), relu=True),  # 6 channels: a tail of 2
    _conv_case((1, 32, 7, 7), 48, 1),
    _conv_case((1, 3, 16, 16), 16, 7, stride=(2, 2), padding=(3, 3), in_zero_point=0),
    # channel blocks in and out: C = 20 in blocks of 16 (the last padded), K = 24 past one panel of 16
    _conv_case((2, 20, 9, 9), 24, 3, padding=(1, 1), in_block=16, out_block=True, relu=True),
    _conv_case((1, 64, 6, 6), 32, 1, in_block=16),  # blocked in, NCHW out
    _conv_case((1, 8, 8, 8), 32, 3, stride=(2, 2), padding=(1, 1), out_block=True),  # NCHW in, blocked out
    # the input as uint8 codes (graph.requantize), NCHW and blocked
    _conv_case((1, 8, 9, 9), 16, 3, x_dtype="uint8", padding=(1, 1)),
    _conv_case((2, 32, 5, 5), 16, 1, x_dtype="uint8", in_block=16, out_block=True, relu=True),
    # blocked codes read in place by a 1x1 (no quantizing stage): stride 2, C = 20 (the last block padded);
    # a padded 3x3 still lays them out first
    _conv_case((2, 20, 7, 7), 24, 1, x_dtype="uint8", stride=(2, 2), in_block=16),
    _conv_case((1, 16, 6, 6), 16, 3, x_dtype="uint8", padding=(1, 1), in_block=16, out_block=True),
    # depthwise: NCHW in and out, C past a block; blocked float in, blocked out, stride 2; uint8 codes in the
    # weight's blocks read in place (padded by condition, and unpadded), and in other blocks (laid out first)
    _depthwise_case((2, 20, 9, 9), 3, padding=(1, 1), relu=True),
    _depthwise_case((1, 32, 10, 10), 3, stride=(2, 2), padding=(1, 1), in_block=16, out_block=True),
    _depthwise_case((1, 24, 8, 8), 3, x_dtype="uint8", padding=(1, 1), in_block=16, out_block=True, relu=True),
    _depthwise_case((2, 16, 7, 7), 3, x_dtype="uint8", in_block=16, out_block=True),
    _depthwise_case((1, 16, 9, 9), 5, x_dtype="uint8", stride=(2, 2), padding=(2, 2), in_block=8),
    Case("dequantize_add", [(2, 3, 5, 4), (2, 3, 5, 4)], ["float32", "uint8"], attrs={"scale": 0.05, "zero_point": 3},
         make=_residual, grad=False),
    Case("dequantize_add", [(7, 33), (7, 33)], ["float32", "int8"],
         attrs={"scale": 0.5, "zero_point": -2, "dtype": "int8"}, make=_residual, grad=False),
]
