"""ONNX shape and data-movement ops, and the constants and shape arithmetic
that fold as the model runs (``Shape``, ``Gather`` on shapes,
``ConstantOfShape``, ``Range``...)."""
from __future__ import annotations

import numpy as np

from ..te import call
from . import ops
from .onnx_table import converter
from .values import dim, ints, is_kiln, materialize, scalar, shape_of, static_array, tensor_or_static


@converter("Constant")
def constant(node):
    from onnx import numpy_helper
    attrs = node.attrs
    if "value" in attrs:
        return tensor_or_static(numpy_helper.to_array(attrs["value"]))
    for key, dtype in (("value_float", np.float32), ("value_floats", np.float32), ("value_int", np.int64),
                       ("value_ints", np.int64)):
        if key in attrs:
            return np.asarray(attrs[key], dtype=dtype)
    raise node.fail(f"a Constant with {', '.join(attrs) or 'no value'}; supported: value, value_float(s), "
                    "value_int(s)")


@converter("Reshape")
def reshape(node, x, shape=None):
    target = node.attr("shape") if shape is None else ints(shape, "shape", node.where)
    return ops.reshape(x, target, allow_zero=bool(node.attr("allowzero", 0)))


@converter("Flatten")
def flatten(node, x):
    return ops.flatten(x, int(node.attr("axis", 1)))


@converter("Transpose")
def transpose(node, x):
    return ops.transpose(x, node.attr("perm"))


@converter("Shape")
def shape(node, x):
    dims = shape_of(x)
    start, end = node.attr("start", 0), node.attr("end")
    return static_array(dims[start:end])


@converter("Size")
def size(node, x):
    total = 1
    for d in shape_of(x):
        total = total * d
    return np.asarray(total, dtype=np.int64) if isinstance(total, int) else static_array([total]).reshape(())


@converter("Squeeze")
def squeeze(node, x, axes=None):
    axes = node.attr("axes") if node.opset < 13 else None if axes is None else ints(axes, "axes", node.where)
    return ops.squeeze(x, axes)


@converter("Unsqueeze")
def unsqueeze(node, x, axes=None):
    axes = node.attr("axes") if node.opset < 13 else ints(axes, "axes", node.where)
    return ops.unsqueeze(x, axes)


@converter("Concat")
def concat(node, *xs):
    rank = max(len(x.shape) for x in xs)
    return ops.concat([x for x in xs], int(node.attr("axis")) % rank)


@converter("Gather")
def gather(node, x, indices):
    axis = int(node.attr("axis", 0)) % len(x.shape)
    return ops.take(x, indices, axis)


@converter("GatherElements")
def gather_elements(node, x, indices):
    axis = int(node.attr("axis", 0)) % len(x.shape)
    if not is_kiln(x) and not is_kiln(indices):
        return np.take_along_axis(np.asarray(x), np.asarray(indices), axis)
    return call("gather_elements", materialize(x, "GatherElements"), materialize(indices, "GatherElements"),
                axis=axis)


@converter("Slice")
def slice_(node, x, starts=None, ends=None, axes=None, steps=None):
    if node.opset < 10:
        starts, ends, axes = node.attr("starts"), node.attr("ends"), node.attr("axes")
    else:
        starts, ends = ints(starts, "starts", node.where), ints(ends, "ends", node.where)
        axes = None if axes is None else ints(axes, "axes", node.where)
        steps = None if steps is None else ints(steps, "steps", node.where)
    axes = list(range(len(starts))) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    big = 2**62
    ends = [min(max(e, -big), big) if isinstance(e, int) else e for e in ends]
    starts = [min(max(s, -big), big) if isinstance(s, int) else s for s in starts]
    return ops.slice_(x, starts, ends, axes, steps)


@converter("Split")
def split(node, x, sizes=None):
    axis = int(node.attr("axis", 0)) % len(x.shape)
    length = dim(x.shape[axis])
    if node.opset < 13:
        sizes = node.attr("split")
    elif sizes is not None:
        sizes = ints(sizes, "split", node.where)
    if not sizes:
        parts = node.attr("num_outputs", node.n_outputs)
        chunk = -(-length // parts)
        sizes = [min(chunk, length - k * chunk) for k in range(parts)]
    return ops.split(x, [int(s) for s in sizes], axis)


@converter("Expand")
def expand(node, x, shape):
    return ops.expand(x, ints(shape, "shape", node.where))


@converter("ConstantOfShape")
def constant_of_shape(node, shape):
    from onnx import numpy_helper
    value = node.attr("value")
    fill = numpy_helper.to_array(value).reshape(-1)[0] if value is not None else np.float32(0)
    fill = tensor_or_static(np.asarray(fill))
    return ops.full(ints(shape, "shape", node.where), fill.reshape(()), str(fill.dtype))


@converter("Range")
def range_(node, start, limit, delta):
    dtype = str(start.dtype) if is_kiln(start) else str(np.asarray(start).dtype).replace("object", "int64")
    start, limit, delta = (scalar(v, name, node.where) for v, name in ((start, "start"), (limit, "limit"),
                                                                       (delta, "delta")))
    return ops.arange(start, limit, delta, dtype)


@converter("Tile")
def tile(node, x, repeats):
    repeats = ints(repeats, "repeats", node.where)
    if not is_kiln(x):
        return np.tile(np.asarray(x), repeats)
    shape = shape_of(x)
    inter = []
    for r, d in zip(repeats, shape):
        inter += [1, d]
    y = ops.reshape(x, inter, allow_zero=True)
    y = ops.expand(y, [v for r, d in zip(repeats, shape) for v in (r, d)])
    return ops.reshape(y, [r * d for r, d in zip(repeats, shape)], allow_zero=True)


@converter("Pad")
def pad(node, x, pads=None, value=None, axes=None):
    mode = node.attr("mode", "constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in ("constant", "reflect", "edge"):
        raise node.refuse("mode", mode, "constant, reflect or edge")
    rank = len(x.shape)
    if node.opset < 11:
        pads, fill = node.attr("pads"), node.attr("value", 0.0)
    else:
        pads = ints(pads, "pads", node.where)
        fill = 0 if value is None or np.asarray(value).size == 0 else scalar(value, "constant_value", node.where)
    axes = list(range(rank)) if axes is None else [int(a) % rank for a in ints(axes, "axes", node.where)]
    width = [(0, 0)] * rank
    for k, axis in enumerate(axes):
        width[axis] = (int(pads[k]), int(pads[k + len(axes)]))
    return ops.pad(x, width, mode, fill)


@converter("Trilu")
def trilu(node, x, k=None):
    k = 0 if k is None else int(scalar(k, "k", node.where))
    upper = bool(node.attr("upper", 1))
    rows, cols = (dim(d) for d in shape_of(x)[-2:])
    if not isinstance(rows, int) or not isinstance(cols, int):
        raise node.fail("Trilu of a symbolic matrix size")
    keep = np.triu(np.ones((rows, cols), bool), k) if upper else np.tril(np.ones((rows, cols), bool), k)
    if not is_kiln(x):
        return np.where(keep, np.asarray(x), np.zeros((), np.asarray(x).dtype))
    return ops.where(keep, x, np.zeros((), np.dtype(str(x.dtype))))


@converter("DepthToSpace", "SpaceToDepth")
def depth_space(node, x):
    n, c, h, w = shape_of(x)
    b = int(node.attr("blocksize"))
    mode = node.attr("mode", "DCR")
    if mode not in ("DCR", "CRD"):
        raise node.refuse("mode", mode, "'DCR' or 'CRD'")
    if node.op_type == "SpaceToDepth":
        y = ops.reshape(x, [n, c, h // b, b, w // b, b])
        perm = [0, 3, 5, 1, 2, 4] if mode == "DCR" else [0, 1, 3, 5, 2, 4]
        return ops.reshape(ops.transpose(y, perm), [n, c * b * b, h // b, w // b])
    if mode == "DCR":
        y = ops.transpose(ops.reshape(x, [n, b, b, c // (b * b), h, w]), [0, 3, 4, 1, 5, 2])
    else:
        y = ops.transpose(ops.reshape(x, [n, c // (b * b), b, b, h, w]), [0, 1, 4, 2, 5, 3])
    return ops.reshape(y, [n, c // (b * b), h * b, w * b])
