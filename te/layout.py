"""Channel-blocked layouts: NCHW <-> NCHW[c]c.

A blocked tensor keeps ``c`` channels innermost: (N, C, H, W) becomes
(N, ceil(C / c), H, W, c), the channels past C zero. A convolution whose
output tile is ``c`` channels wide writes such a tensor with contiguous
vector stores, and the next convolution reads it as it is; the exporter
(``graph.layout``) converts only where a blocked value meets an op that
reads NCHW.

``to_blocked(x, block=c)``: (N, C, H, W) -> (N, ceil(C / c), H, W, c).
``from_blocked(x, channels=C)``: (N, B, H, W, c) -> (N, C, H, W), C <= B * c.
"""
from __future__ import annotations

import numpy as np
from tvm import te, tirx

from ..errors import ShapeError
from . import attrs as A
from .oprefs import op_ref
from .registry import Op, register
from .shapes import DTYPES, is_static, same_dim, shape_str, static

to_blocked, from_blocked = op_ref("to_blocked"), op_ref("from_blocked")


def blocks(channels, block: int):
    """Blocks of ``block`` channels that hold ``channels`` (the last one zero-padded)."""
    value = static(channels)
    return -(-value // block) if isinstance(value, int) else (channels + block - 1) // block


def blocked_array(x: np.ndarray, block: int) -> np.ndarray:
    """numpy's ``to_blocked``: (N, C, H, W) -> (N, ceil(C / block), H, W, block)."""
    n, c, h, w = x.shape
    padded = np.zeros((n, blocks(c, block) * block, h, w), x.dtype)
    padded[:, :c] = x
    return np.ascontiguousarray(padded.reshape(n, blocks(c, block), block, h, w).transpose(0, 1, 3, 4, 2))


def plain_array(x: np.ndarray, channels: int) -> np.ndarray:
    """numpy's ``from_blocked``: (N, B, H, W, c) -> (N, channels, H, W)."""
    n, b, h, w, c = x.shape
    return np.ascontiguousarray(x.transpose(0, 1, 4, 2, 3).reshape(n, b * c, h, w)[:, :channels])


@register
class ToBlocked(Op):
    """(N, C, H, W) -> (N, ceil(C / block), H, W, block); channels past C are 0."""

    name = "to_blocked"
    dtypes = (*DTYPES, "uint8", "int8")  # an int8 layer's codes move in blocks too
    grad_inputs = ()
    grad_output = False
    attrs = {"block": A.Attr(A.positive_int, doc="channels per block (innermost)")}

    def infer_shape(self, x, block):
        if len(x) != 4:
            raise ShapeError(f"got {shape_str(x)}, expected a 4-D NCHW tensor", op=self.name, arg="x")
        n, c, h, w = x
        return (n, blocks(c, block), h, w, block)

    def compute(self, x, block):
        c = x.shape[1]

        def body(n, b, y, z, j):  # the clamped index keeps the padded lanes' read in bounds
            return tirx.if_then_else(b * block + j < c, x[n, tirx.min(b * block + j, c - 1), y, z],
                                     tirx.const(0, x.dtype))

        return te.compute(self.infer_shape(tuple(x.shape), block), body, name=self.name, tag="injective")

    def reference(self, x, block):
        return blocked_array(x, block)

    def gradient(self, g, node):
        return (from_blocked(g, channels=static(node.inputs[0].shape[1])),)


@register
class FromBlocked(Op):
    """(N, B, H, W, c) -> (N, channels, H, W): the first ``channels`` of the B * c."""

    name = "from_blocked"
    dtypes = (*DTYPES, "uint8", "int8")
    grad_inputs = ()
    grad_output = False
    attrs = {"channels": A.Attr(A.positive_int, doc="C, the channels the blocks hold")}

    def infer_shape(self, x, channels):
        if len(x) != 5 or not is_static(x[4]) or static(x[4]) < 1:
            raise ShapeError(f"got {shape_str(x)}, expected a 5-D NCHW[c]c tensor with a static block >= 1",
                             op=self.name, arg="x")
        if not same_dim(x[1], blocks(channels, static(x[4]))):
            raise ShapeError(f"got {shape_str(x)}, expected ceil({channels} / {static(x[4])}) blocks for "
                             f"channels={channels}", op=self.name, arg="x")
        return (x[0], channels, x[2], x[3])

    def compute(self, x, channels):
        block = static(x.shape[4])
        return te.compute(self.infer_shape(tuple(x.shape), channels),
                          lambda n, c, y, z: x[n, c // block, y, z, c % block], name=self.name, tag="injective")

    def reference(self, x, channels):
        return plain_array(x, channels)

    def gradient(self, g, node):
        return (to_blocked(g, block=static(node.inputs[0].shape[4])),)
