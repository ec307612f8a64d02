"""Indexing and joining: getitem (numpy basic slicing), its scatter-back
gradient, stack, concatenate and split."""
from __future__ import annotations

import numpy as np
import tvm
from tvm import te, tirx

from ..errors import AttrError, ShapeError
from . import attrs as A
from .oprefs import op_ref
from .registry import Op, register
from .shapes import dtype_of, is_static, normalize_axis, promote, same_dim, shape_str, static

# the gradients' ops that have no operator (see oprefs)
getitem_grad, split, concatenate = op_ref("getitem_grad"), op_ref("split"), op_ref("concatenate")


def _index(op: str, name: str, value):
    """Canonical index: a tuple of ints, (start, stop, step) triples and "..."."""
    items = value if isinstance(value, tuple) else (value,)
    out = []
    for item in items:
        if isinstance(item, slice):
            item = (item.start, item.stop, item.step)
        if item is Ellipsis or item == "...":
            out.append("...")
        elif isinstance(item, (int, np.integer)) and not isinstance(item, bool):
            out.append(int(item))
        elif _symbolic_prefix(item):
            out.append((None, item[1], None))
        elif isinstance(item, (tuple, list)) and len(item) == 3 and all(
                v is None or (isinstance(v, (int, np.integer)) and not isinstance(v, bool)) for v in item):
            if item[2] == 0:
                raise AttrError(f"got {value!r}: a slice step cannot be zero", op=op, arg=name)
            out.append(tuple(None if v is None else int(v) for v in item))
        else:
            raise AttrError(f"got {value!r}, expected ints, slices (or (start, stop, step)) and ...", op=op, arg=name)
    if out.count("...") > 1:
        raise AttrError(f"got {value!r}, expected at most one ...", op=op, arg=name)
    return tuple(out)


def _symbolic_prefix(item) -> bool:
    """Whether ``item`` is a slice ``[:n]`` whose stop is symbolic (a traced
    sequence length taking the first rows of a table)."""
    return (isinstance(item, (tuple, list)) and len(item) == 3 and item[0] in (None, 0) and item[2] in (None, 1)
            and isinstance(item[1], tvm.ir.expr.Expr) and not isinstance(item[1], tirx.IntImm))


def resolve(op: str, shape, index):
    """Per input dim: ("int", k) or ("slice", start, step, length), numpy rules."""
    n_real = sum(1 for it in index if it != "...")
    if n_real > len(shape):
        raise ShapeError(f"got {n_real} indices for an input of rank {len(shape)}", op=op, arg="index")
    fill = [(None, None, None)] * (len(shape) - n_real)
    if "..." in index:
        k = index.index("...")
        index = index[:k] + tuple(fill) + index[k + 1:]
    else:
        index = tuple(index) + tuple(fill)
    out = []
    for d, it in zip(shape, index):
        if _symbolic_prefix(it):  # [:n]: the caller bounds n by the dim (the Predictor checks the length)
            out.append(("slice", 0, 1, d if not is_static(d) and same_dim(d, it[1]) else it[1]))
            continue
        if not is_static(d):
            if it != (None, None, None) and it != (None, None, 1):
                raise ShapeError("a symbolic dim can only be taken whole (:)", op=op, arg="index")
            out.append(("slice", 0, 1, d))
            continue
        d = static(d)
        if isinstance(it, int):
            if not -d <= it < d:
                raise ShapeError(f"index {it} is out of range for a dim of size {d}", op=op, arg="index")
            out.append(("int", it % d))
        else:
            start, stop, step = slice(*it).indices(d)
            out.append(("slice", start, step, len(range(start, stop, step))))
    return out


@register
class GetItem(Op):
    """numpy basic indexing ``x[index]``: ints drop their dim, slices keep it."""

    name = "getitem"
    grad_inputs = ()
    grad_output = False
    attrs = {"index": A.Attr(_index, doc="ints, (start, stop, step) slices and ..., one per dim")}

    def infer_shape(self, x, index):
        return tuple(r[3] for r in resolve(self.name, x, index) if r[0] == "slice")

    def compute(self, x, index):
        res = resolve(self.name, tuple(x.shape), index)

        def body(*i):
            it, src = iter(i), []
            for r in res:
                src.append(r[1] if r[0] == "int" else r[1] + next(it) * r[2])
            return x(*src)

        return te.compute(self.infer_shape(tuple(x.shape), index), body, name=self.name, tag="injective")

    def dim_bounds(self, shapes, index):
        res = resolve(self.name, shapes[0], index)  # one item per input dim
        return {r[3].name: static(d) for d, r in zip(shapes[0], res)
                if r[0] == "slice" and is_static(d) and isinstance(r[3], tirx.Var)}

    def reference(self, x, index):
        return x[tuple(Ellipsis if it == "..." else it if isinstance(it, int) else slice(*it) for it in index)].copy()

    def gradient(self, g, node):
        x = node.inputs[0]
        return (getitem_grad(g, index=node.attrs["index"], shape=tuple(x.shape)),)


@register
class GetItemGrad(Op):
    """Scatter ``g`` back into zeros of ``shape`` at the positions ``x[index]`` read."""

    name = "getitem_grad"
    grad_inputs = ()
    grad_output = False
    attrs = {"index": A.Attr(_index, doc="the getitem index"), "shape": A.Attr(A.int_tuple(minimum=0),
                                                                             doc="the input shape of getitem")}

    def infer_shape(self, g, index, shape):
        want = GetItem.infer_shape(self, shape, index)
        if len(want) != len(g) or not all(same_dim(a, b) for a, b in zip(want, g)):
            raise ShapeError(f"got gradient {shape_str(g)}, expected {shape_str(want)}", op=self.name, arg="g")
        return shape

    def compute(self, g, index, shape):
        res = resolve(self.name, shape, index)
        zero = tirx.const(0, dtype_of(g))

        def body(*i):
            conds, src = [], []
            for v, r in zip(i, res):
                if r[0] == "int":
                    conds.append(v == r[1])
                    continue
                _, start, step, length = r
                delta = (v - start) if step > 0 else (start - v)
                conds += [delta >= 0, tirx.floormod(delta, abs(step)) == 0, tirx.floordiv(delta, abs(step)) < length]
                src.append(tirx.floordiv(delta, abs(step)))
            return tirx.if_then_else(tirx.all(*conds), g(*src), zero) if conds else g(*src)

        return te.compute(shape, body, name=self.name, tag="injective")

    def reference(self, g, index, shape):
        out = np.zeros(shape, g.dtype)
        out[tuple(Ellipsis if it == "..." else it if isinstance(it, int) else slice(*it) for it in index)] = g
        return out

    def gradient(self, g, node):
        return (g[node.attrs["index"]],)


class _Join(Op):
    arity = None
    attrs = {"axis": A.Attr(A.integer, default=0, doc="the axis to join along")}

    def infer_dtype(self, *dtypes, axis):
        return promote(self.name, *dtypes)

    def pick(self, xs, offsets, axis, i, dt):
        """x_k[i with i[axis] - offsets[k]] for the k whose range holds i[axis]
        (``offsets`` has one more entry than ``xs``: the running ends), found
        by halving the inputs: log2(k) tests per element, not up to k (a
        chain of 64 tests made joining 64 rows of states 4x slower than a copy)."""
        def among(lo: int, hi: int):
            if hi - lo == 1:
                return xs[lo](*self.shift(i, axis, offsets[lo])).astype(dt)
            mid = (lo + hi) // 2
            return tirx.if_then_else(i[axis] < offsets[mid], among(lo, mid), among(mid, hi))

        return among(0, len(xs))

    @staticmethod
    def shift(i, axis, off):
        return [v - off if k == axis else v for k, v in enumerate(i)]


@register
class Stack(_Join):
    """numpy.stack: inputs of one shape joined along a new ``axis``."""

    name = "stack"
    grad_inputs = ()
    grad_output = False

    def infer_shape(self, *xs, axis):
        first = xs[0]
        for k, s in enumerate(xs[1:], 1):
            if len(s) != len(first) or not all(same_dim(a, b) for a, b in zip(s, first)):
                raise ShapeError(f"input {k} is {shape_str(s)}, expected {shape_str(first)} like input 0",
                                 op=self.name, arg="inputs")
        ax = normalize_axis(self.name, axis, len(first) + 1)
        return tuple(first[:ax]) + (len(xs),) + tuple(first[ax:])

    def compute(self, *xs, axis):
        out = self.infer_shape(*[tuple(x.shape) for x in xs], axis=axis)
        ax = normalize_axis(self.name, axis, len(out))
        dt = self.infer_dtype(*[dtype_of(x) for x in xs], axis=axis)

        def body(*i):  # input k is concatenate's input k of extent 1 along ax
            return self.pick([lambda *j, x=x: x(*(j[:ax] + j[ax + 1:])) for x in xs], list(range(len(xs) + 1)), ax,
                             i, dt)

        return te.compute(out, body, name=self.name, tag="injective")

    def reference(self, *xs, axis):
        return np.stack(xs, axis=axis)

    def gradient(self, g, node):
        ax = normalize_axis(self.name, node.attrs["axis"], len(g.shape))
        parts = split(g, axis=ax, sections=len(node.inputs))
        parts = parts if isinstance(parts, (list, tuple)) else [parts]
        return tuple(p.reshape(x.shape) for p, x in zip(parts, node.inputs))


@register
class Concatenate(_Join):
    """numpy.concatenate along an existing ``axis``."""

    name = "concatenate"
    grad_inputs = ()
    grad_output = False

    def infer_shape(self, *xs, axis):
        first = xs[0]
        if len(first) == 0:
            raise ShapeError("got 0-d inputs, which have no axis to join along (numpy refuses them too)",
                             op=self.name, arg="inputs")
        ax = normalize_axis(self.name, axis, len(first))
        total = 0
        for k, s in enumerate(xs):
            if len(s) != len(first) or not all(same_dim(a, b) for j, (a, b) in enumerate(zip(s, first)) if j != ax):
                raise ShapeError(f"input {k} is {shape_str(s)}, which does not match {shape_str(first)} off axis {ax}",
                                 op=self.name, arg="inputs")
            total = total + static(s[ax])
        return tuple(total if j == ax else d for j, d in enumerate(first))

    def compute(self, *xs, axis):
        out = self.infer_shape(*[tuple(x.shape) for x in xs], axis=axis)
        ax = normalize_axis(self.name, axis, len(out))
        dt = self.infer_dtype(*[dtype_of(x) for x in xs], axis=axis)
        offsets = [0]
        for x in xs:
            offsets.append(offsets[-1] + static(x.shape[ax]))
        return te.compute(out, lambda *i: self.pick(list(xs), offsets, ax, i, dt), name=self.name, tag="injective")

    def reference(self, *xs, axis):
        return np.concatenate(xs, axis=axis)

    def gradient(self, g, node):
        ax = normalize_axis(self.name, node.attrs["axis"], len(g.shape))
        grads, off = [], 0
        for x in node.inputs:
            n = static(x.shape[ax])
            grads.append(g[tuple(slice(off, off + n, 1) if j == ax else slice(None) for j in range(len(g.shape)))])
            off += n
        return tuple(grads)


@register
class Split(Op):
    """numpy.split with an int: ``sections`` equal parts along ``axis``."""

    name = "split"
    grad_inputs = ()
    grad_output = False
    multi_output = True
    attrs = {"axis": A.Attr(A.integer, default=0, doc="the axis to split"),
             "sections": A.Attr(A.positive_int, doc="number of equal parts")}

    def infer_shape(self, x, axis, sections):
        if len(x) == 0:
            raise ShapeError("cannot split a 0-d input", op=self.name, arg="x")
        ax = normalize_axis(self.name, axis, len(x))
        if not is_static(x[ax]) or static(x[ax]) % sections:
            raise ShapeError(f"axis {ax} of {shape_str(x)} does not divide into {sections} equal parts",
                             op=self.name, arg="sections")
        part = tuple(static(x[ax]) // sections if k == ax else d for k, d in enumerate(x))
        return [part] * sections

    def compute(self, x, axis, sections):
        part = self.infer_shape(tuple(x.shape), axis, sections)[0]
        ax = normalize_axis(self.name, axis, len(part))
        n = part[ax]

        def part_of(k):
            return lambda *i: x(*[v + k * n if j == ax else v for j, v in enumerate(i)])

        return [te.compute(part, part_of(k), name=self.name if k == 0 else f"{self.name}_{k}", tag="injective")
                for k in range(sections)]

    def reference(self, x, axis, sections):
        return [p.copy() for p in np.split(x, sections, axis=axis)]

    def gradient(self, out_grads, node):
        return (concatenate(*out_grads, axis=node.attrs["axis"]),)
