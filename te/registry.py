"""The operator registry: each op is declared once, as one class.

An op knows its attributes, its shape and dtype rules, its tensor expression
(``compute``), its adjoint (``gradient``, written as arithmetic on values —
every operator and method is a registered op, so gradients are graphs) and a
numpy ``reference`` used by tests::

    @register
    class Exp(Op):
        name = "exp"
        def compute(self, x):
            return te.compute(x.shape, lambda *i: tirx.exp(x(*i)), name="exp", tag="injective")
        def gradient(self, out_grad, node):
            return (out_grad * node,)
        def reference(self, x):
            return np.exp(x)

``compute`` must name its output block after the op (the schedules find it by
that name) and tag it with the op's ``family``.
"""
from __future__ import annotations

import contextvars
from types import MappingProxyType
from typing import Any, Mapping, Sequence

import numpy as np

from ..errors import AttrError, DTypeError, OpNotFoundError, ShapeError
from .attrs import REQUIRED, Attr
from .shapes import DTYPES, canonical, check_dtype, shape_str, upper_bounds
from .workload import Workload

_REGISTRY: dict[str, "Op"] = {}


class Op:
    """Base class of every operator. Subclasses set the class attributes and
    override the methods; ``check`` runs the whole validation."""

    #: registered name (also the name of the output block).
    name: str = ""
    #: number of tensor inputs, or None for a variadic op (``stack``).
    arity: int | None = 1
    #: attributes: name -> Attr(parser, default, doc).
    attrs: Mapping[str, Attr] = MappingProxyType({})
    #: True for ops whose output element i reads element i of each input
    #: (numpy broadcasting allowed): a graph fuses them into their producer's
    #: write-back (``graph.fuse``).
    elementwise: bool = False
    #: schedule family the templates dispatch on (and the output block's tag):
    #: "injective", "reduction", "softmax", "matmul", "conv2d",
    #: "conv2d_backward_weight", "conv2d_winograd", "pool", "norm",
    #: "optimizer", "dynamic".
    family: str = "injective"
    #: dtypes each input may have.
    dtypes: Sequence[str] = DTYPES
    #: False for ops with no gradient (comparisons, integer outputs).
    differentiable: bool = True
    #: True for ops that return a list of outputs (``split``), however many.
    multi_output: bool = False
    #: what ``gradient`` reads besides the output gradient: the indices of the
    #: inputs whose values it uses (None: all of them) and whether it uses the
    #: output's value. Autograd keeps only these after the forward pass, so an
    #: activation no backward reads is freed as soon as the user drops it.
    grad_inputs: tuple | None = None
    grad_output: bool = True
    #: True for ops whose output length depends on the values (``masked_select``):
    #: ``infer_shape`` returns the output with a ``Bounded`` dim, and the kernel
    #: writes storage of the upper bound plus the actual length (a second
    #: output, int32 of shape (1,)); callers get the first ``length`` rows.
    data_dependent: bool = False
    #: ``{output: input}``: the output may be written into that input's memory
    #: (same shape and dtype, each element read before it is written).
    inplace: Mapping[int, int] = MappingProxyType({})

    # -- traits the graph passes and the measurements read ----------------------
    #: graph.fuse: a binary op whose operands may swap, so it takes its
    #: producer's output as an epilogue whichever operand that is.
    commutative: bool = False
    #: graph.lower and graph.fuse: its output is its input's memory in another
    #: shape (a Relax reshape, no kernel), so it takes no epilogue.
    view: bool = False
    #: graph.fuse: a relu after it becomes its own ``relu`` attribute (the
    #: epilogue its template computes) instead of an epilogue entry.
    relu_attr: bool = False
    #: graph.layout: reads and writes its weight's channel blocks (``in_block``,
    #: ``out_block``), so a blocked layout is carried from one such op to the next.
    channel_blocked: bool = False
    #: graph.layout and graph.fuse: a pooling whose ``layout`` may be "NCHWc",
    #: so it reads a channel-blocked input as it is, and in that layout a
    #: ``image_block_tasks`` producer can compute it in its tasks (``fuse_pools``).
    pools_blocked: bool = False
    #: graph.layout: a windowed per-channel op (``max_pool2d``) whose ``layout``
    #: may be "NCHWc": between channel-blocked ops it runs in their blocks and
    #: writes blocks too.
    passes_blocks: bool = False
    #: graph.fuse: clamps a rounding of its input (``quantize``): an epilogue
    #: chains at most ``graph.fuse.MAX_SATURATING`` of them.
    saturates: bool = False
    #: graph.requantize: quantizes its first input inside (attributes
    #: ``in_scale``, ``in_zero_point``) and takes it as those uint8 codes
    #: instead, so a producer read by such ops alone can write the codes.
    quantized_input: bool = False
    #: graph.fuse: each parallel task of its kernel writes whole maps of one
    #: image's output channel block, so a pooling of its output (``fuse_pools``)
    #: and a producer of its input (``fuse_prologues``) can run in the task.
    image_block_tasks: bool = False
    #: graph.fuse: can be computed image by image, register-tiled, inside an
    #: ``image_block_tasks`` consumer's tasks as its ``prologue``.
    in_task_prologue: bool = False
    #: graph.fold: the operands in which the op is affine when the other is a
    #: constant (``divide``: its dividend only), so a chain of it folds into weights.
    affine_operands: tuple[int, ...] = ()
    #: graph.fold: the axis of the weight (input 1) holding the output channels
    #: (output axis 1) of an op linear in that weight (its NCHW form, without
    #: a relu), so an affine chain after it folds into the weight and into its
    #: bias (input 2) where it has one; None: nothing folds into it.
    fold_weight_axis: int | None = None
    #: graph.fold: ``(scale, offset)``, the inputs of an op whose output is
    #: ``sums * scale + offset`` per output channel (axis 1; the int8 products:
    #: without their relu), so an affine chain after it folds into them.
    affine_output: tuple[int, int] | None = None
    #: graph.transposes: its output is its input's axes in the order
    #: ``perm(ndim, axes)`` (a transpose).
    permutes_axes: bool = False
    #: graph.transposes: a matrix product reading either operand with its last
    #: two axes swapped (``transpose_a``, ``transpose_b``), so a transpose
    #: before or after it folds into it.
    transposed_operands: bool = False
    #: graph.transposes: ``x @ w + b`` of matrices (``relu`` optional), which a
    #: product reading ``w`` transposed and a bias add compute alike.
    dense_layer: bool = False
    #: graph.products: its output is the sum of its two operands (``add``),
    #: so a sum of matrix products joins into one product over their K axes.
    sums_operands: bool = False
    #: graph.attention: ``softmax`` over ``axis`` (exp(x - max) over its sum),
    #: which with the products before and after it is attention.
    normalizes_rows: bool = False
    #: runtime.measure: its work is counted in floating-point operations
    #: (GFLOPS from ``flops``), not bytes moved (GB/s).
    compute_bound: bool = False

    # -- declared per op ------------------------------------------------------
    def infer_shape(self, *shapes, **attrs):
        """Output shape (a tuple of dims), or a list of them for several outputs."""
        raise NotImplementedError

    def infer_dtype(self, *dtypes, **attrs):
        """Output dtype; by default the first input's."""
        return dtypes[0]

    def compute(self, *inputs, **attrs):
        """The TVM tensor expression: te.Tensor inputs -> te.Tensor (or a list)."""
        raise NotImplementedError

    def grad_saves(self, attrs) -> tuple:
        """``(inputs, output)`` the gradient reads for these attrs: the input
        indices (None: all) and whether the output (``grad_inputs``/``grad_output``)."""
        return self.grad_inputs, self.grad_output

    def gradient(self, out_grad, node):
        """Adjoints of the inputs (None where not differentiable). ``node`` is the
        op's output value: ``node.inputs``, ``node.attrs``, ``node.shape``."""
        raise NotImplementedError(f"op '{self.name}' has no gradient")

    def reference(self, *arrays, **attrs):
        """numpy implementation used by tests."""
        raise NotImplementedError

    def flops(self, shapes, **attrs) -> float:
        """Floating-point operations of one call (for GFLOPS); 0 = memory-bound."""
        return 0.0

    def kernel_flops(self, shapes, **attrs) -> float:
        """Floating-point operations its kernel's algorithm does (what the
        machine's peak bounds): ``flops``, except for an op whose kernel does
        less than the computation its GFLOPS count (a Winograd conv)."""
        return self.flops(shapes, **attrs)

    def dim_bounds(self, shapes, **attrs) -> dict:
        """Upper bounds an application on inputs of ``shapes`` sets on
        symbolic sizes: ``{variable name: the most it may be}`` (getitem's
        ``[:n]`` of a dim of size d bounds n by d; an export records it)."""
        return {}

    # -- shared machinery -----------------------------------------------------
    def parse_attrs(self, attrs: Mapping[str, Any] | None = None) -> dict:
        """Validated attributes in canonical form, defaults filled in."""
        attrs = dict(attrs or {})
        unknown = sorted(set(attrs) - set(self.attrs))
        if unknown:
            known = ", ".join(sorted(self.attrs)) or "none"
            raise AttrError(f"unknown attribute(s) {unknown}; this op takes: {known}", op=self.name,
                            arg=unknown[0])
        out = {}
        for key, spec in self.attrs.items():
            if key in attrs:
                out[key] = spec.parse(self.name, key, attrs[key])
            elif spec.default is REQUIRED:
                raise AttrError("is required", op=self.name, arg=key)
            else:
                out[key] = spec.default
        return out

    def check(self, shapes: Sequence, dtypes: Sequence[str] | str | None = None,
              attrs: Mapping[str, Any] | None = None) -> Workload:
        """Validate a call and return its ``Workload``.

        ``dtypes`` is one dtype per input, or one dtype for all of them
        (default float32). Raises ShapeError / DTypeError / AttrError naming
        the op and argument, before TVM is ever called.
        """
        try:
            shapes = list(shapes)
        except TypeError:
            raise ShapeError(f"got {shapes!r}, expected a list of input shapes", op=self.name, arg="shapes") from None
        if self.arity is not None and len(shapes) != self.arity:
            raise ShapeError(f"got {len(shapes)} input(s), expected {self.arity}", op=self.name, arg="inputs")
        if self.arity is None and len(shapes) == 0:
            raise ShapeError("got no inputs, expected at least one", op=self.name, arg="inputs")
        dtypes = self._dtype_names(dtypes, len(shapes))
        shapes = [canonical(s, self.name, f"input {i}") for i, s in enumerate(shapes)]
        for i, d in enumerate(dtypes):
            check_dtype(self.name, d, self.dtypes, arg=f"input {i} dtype")
        attrs = self.parse_attrs(attrs)
        out_shapes = self.infer_shape(*shapes, **attrs)
        out_dtypes = self.infer_dtype(*dtypes, **attrs)
        if self.data_dependent:  # the kernel's outputs: the storage and the length
            out_shapes, out_dtypes = [upper_bounds(out_shapes), (1,)], [out_dtypes, "int32"]
        elif not self.multi_output:
            out_shapes, out_dtypes = [out_shapes], [out_dtypes]
        elif isinstance(out_dtypes, str):
            out_dtypes = [out_dtypes] * len(out_shapes)
        return Workload(self, attrs, tuple(shapes), tuple(dtypes),
                        tuple(canonical(s, self.name, "output") for s in out_shapes), tuple(out_dtypes))

    def _dtype_names(self, dtypes, count: int) -> list[str]:
        """One canonical dtype name per input (``None``: float32 for all)."""
        if dtypes is None or isinstance(dtypes, str):
            dtypes = [dtypes or "float32"] * count
        try:
            names = [str(np.dtype(d)) for d in dtypes]
        except TypeError as exc:
            raise DTypeError(f"got {list(dtypes)}, expected dtype names", op=self.name, arg="dtypes") from exc
        if len(names) != count:
            raise DTypeError(f"got {len(names)} dtype(s) for {count} input(s)", op=self.name, arg="dtypes")
        return names

    def __repr__(self) -> str:
        return f"<kiln op {self.name} ({self.family})>"


def register(cls: type[Op]) -> type[Op]:
    """Class decorator: instantiate and register an op under ``cls.name``."""
    op = cls()
    if not op.name:
        raise AttrError("an op needs a name", op=cls.__name__, arg="name")
    if op.name in _REGISTRY:
        raise AttrError("is already registered", op=op.name, arg="name")
    _REGISTRY[op.name] = op
    return cls


def get_op(name: str) -> Op:
    """The registered op called ``name``."""
    if isinstance(name, Op):
        return name
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        close = [n for n in _REGISTRY if isinstance(name, str) and (name in n or n in name)]
        hint = f"; did you mean {', '.join(close)}?" if close else "; `kiln ops` lists them"
        raise OpNotFoundError(f"no op named {name!r}{hint}", op=str(name)) from None


def list_ops() -> list[str]:
    """Names of all registered ops, sorted."""
    return sorted(_REGISTRY)


#: a function that may answer an op's application in its place: ``hook(op, inputs, attrs)`` returns the
#: value, or None to apply the op as declared (``kiln.quantize`` observes and rewrites products through it;
#: ``intercept`` sets it for a block)
_INTERCEPT: contextvars.ContextVar = contextvars.ContextVar("kiln_intercept", default=None)


class intercept:
    """``with intercept(hook):`` every ``call`` in the block is offered to
    ``hook(op, inputs, attrs)`` first (its own calls included: it answers
    None for those it leaves alone)."""

    def __init__(self, hook):
        self.hook, self._token = hook, None

    def __enter__(self):
        self._token = _INTERCEPT.set(self.hook)
        return self

    def __exit__(self, *exc):
        _INTERCEPT.reset(self._token)


def call(name: str, *inputs, **attrs):
    """Apply the registered op ``name`` to values of an evaluation backend.

    Gradients use the values' operators (``g * node``) and, for ops with no
    operator, references checked at import (``kiln.te.oprefs.op_ref``). The backend is the type of an input that has ``_kiln_apply`` — the autograd
    ``Tensor``, the exporter's traced value, or the test suite's evaluator —
    the one with the highest ``_kiln_priority`` when inputs mix kinds.
    """
    op = _REGISTRY.get(name) if type(name) is str else None
    if op is None:
        op = get_op(name)
    backend = None
    for value in inputs:  # a backend that must see every op (the exporter's tracer) outranks eager ones
        kind = type(value)
        if kind is not backend and hasattr(kind, "_kiln_apply") and (
                backend is None or getattr(kind, "_kiln_priority", 0) > getattr(backend, "_kiln_priority", 0)):
            backend = kind
    if backend is None:
        raise ShapeError("no input is a kiln value (a Tensor)", op=name, arg="inputs")
    hook = _INTERCEPT.get()
    if hook is not None:
        out = hook(op, inputs, attrs)
        if out is not None:
            return out
    return backend._kiln_apply(op, inputs, attrs)


def describe(shapes, dtypes) -> str:
    return ", ".join(f"{shape_str(s)}:{d}" for s, d in zip(shapes, dtypes))
