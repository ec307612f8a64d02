"""Shared test helpers: op cases, random inputs, the forward check against the
numpy reference, an eager evaluator for gradients, and central differences."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

import kiln
from kiln.runtime import Predictor
from kiln.te import Bounded, get_op
from kiln.te.value import ValueOps

#: why the CUDA half of an op table skips an op of the serial-compaction family
NO_CUDA_TEMPLATE = "data-dependent ops (a serial compaction) have no CUDA template, by design"


def has_cuda_template(op: str) -> bool:
    """Whether the op runs on CUDA (every family but the serial compaction's)."""
    return get_op(op).family != "dynamic"


TOL = {"float32": dict(rtol=2e-4, atol=2e-5), "float64": dict(rtol=1e-9, atol=1e-10)}


@dataclass
class Case:
    """One call of an op: input shapes, dtypes, attrs, and how to make inputs.

    ``low``/``high`` bound float inputs (e.g. ``low=0.1`` for log's domain);
    ``make(rng, shapes, dtypes)`` replaces the default input generator (e.g.
    integer class labels); ``grad=False`` keeps a case out of gradient checks;
    ``grad_inputs`` lists which inputs the gradient check perturbs.
    """

    op: str
    shapes: list
    dtypes: list | str | None = None
    attrs: dict = field(default_factory=dict)
    low: float = -2.0
    high: float = 2.0
    make: Callable | None = None
    grad: bool = True
    grad_inputs: tuple | None = None

    def dtype_list(self, override: str | None = None) -> list[str]:
        if override:
            return [override if d in ("float32", "float64") else d for d in self.dtype_list()]
        if self.dtypes is None or isinstance(self.dtypes, str):
            return [self.dtypes or "float32"] * len(self.shapes)
        return list(self.dtypes)

    def __str__(self) -> str:
        attrs = ",".join(f"{k}={v}" for k, v in self.attrs.items())
        return f"{self.op}{self.shapes}{self.dtype_list()}{attrs}"


def random_inputs(case: Case, rng: np.random.Generator, dtypes=None) -> list[np.ndarray]:
    dtypes = dtypes or case.dtype_list()
    if case.make is not None:
        return list(case.make(rng, case.shapes, dtypes))
    return [random_array(rng, s, d, case.low, case.high) for s, d in zip(case.shapes, dtypes)]


def random_array(rng, shape, dtype, low=-2.0, high=2.0) -> np.ndarray:
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype.startswith("int"):
        return rng.integers(int(low) - 3, int(high) + 4, size=shape).astype(dtype)
    return rng.uniform(low, high, size=shape).astype(dtype)


def as_list(x):
    return list(x) if isinstance(x, (list, tuple)) else [x]


def assert_close(got, want, dtype: str, what: str = "") -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != numpy's {want.shape}"
    assert str(got.dtype) == str(want.dtype), f"{what}: dtype {got.dtype} != numpy's {want.dtype}"
    if dtype in TOL and got.dtype.kind == "f":
        np.testing.assert_allclose(got, want, equal_nan=True, err_msg=what, **TOL[dtype])
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


def check_forward(case: Case, seed: int = 0, target=None) -> None:
    """Compile the op, run it, compare with its numpy reference (values, shape, dtype);
    for a ``target`` this host cannot run, compile it only."""
    op = get_op(case.op)
    rng = np.random.default_rng(seed)
    dtypes = case.dtype_list()
    arrays = random_inputs(case, rng, dtypes)
    kernel = kiln.build(case.op, case.shapes, dtypes, case.attrs, target=target)
    if target is not None and not target.runs_here:
        return  # a CPU this host cannot run (AVX-512 on an AVX2 host): that it compiles is the check
    got = as_list(kernel(*arrays))
    want = as_list(op.reference(*arrays, **op.parse_attrs(case.attrs)))
    workload = op.check(case.shapes, dtypes, case.attrs)
    parsed, out_shapes, out_dtypes = workload.attrs, workload.out_shapes, workload.out_dtypes
    if op.data_dependent:  # one output: the actual rows, within the bounds infer_shape gives
        out_shapes, out_dtypes = [op.infer_shape(*case.shapes, **parsed)], out_dtypes[:1]
    assert len(got) == len(want) == len(out_shapes)
    for i, (g, w, s, d) in enumerate(zip(got, want, out_shapes, out_dtypes)):
        assert len(g.shape) == len(s) and all(
            (b.low <= n <= b.high) if isinstance(b, Bounded) else n == b for n, b in zip(g.shape, s)), \
            f"{case} output {i}: kernel shape {g.shape} != infer_shape {s}"
        assert str(g.dtype) == d, f"{case} output {i}: kernel dtype {g.dtype} != infer_dtype {d}"
        assert_close(g, np.asarray(w), dtypes[0] if dtypes[0] in TOL else "float32", f"{case} output {i}")


# -- an eager evaluator: gradients are graphs of ops, evaluated with compiled kernels --
class Eager(ValueOps):
    """A value for ``kiln.te.call``: each op runs as a compiled kernel at once.
    Like every kiln value it has the operators (``g * node``, ``x.sum(1)``), so
    gradients run here as they run in autograd and in the exporter's tracer.
    A hollow value (``data=None``) has a shape and dtype only: it stands for
    what an op's gradient declared it does not read, and reading it fails."""

    def __init__(self, data, inputs=(), attrs=None, op=None, like=None):
        self.data = None if data is None else np.asarray(data)
        self.inputs = tuple(inputs)
        self.attrs = dict(attrs or {})
        self.op = op
        self._like = like  # (shape, dtype) of a hollow value

    shape = property(lambda self: self.data.shape if self.data is not None else self._like[0])
    dtype = property(lambda self: str(self.data.dtype) if self.data is not None else self._like[1])
    ndim = property(lambda self: len(self.shape))

    def hollow(self) -> "Eager":
        return Eager(None, self.inputs, self.attrs, self.op, like=(self.shape, self.dtype))

    @classmethod
    def _kiln_apply(cls, op, inputs, attrs):
        inputs = [v if isinstance(v, Eager) else Eager(v) for v in inputs]
        if any(v.data is None for v in inputs):
            raise AssertionError(f"a gradient read a value its op does not declare in grad_inputs/grad_output "
                                 f"(while applying '{op.name}')")
        kernel = kiln.build(op.name, [v.shape for v in inputs], [v.dtype for v in inputs], attrs)
        out = kernel(*[v.data for v in inputs])
        parsed = op.parse_attrs(attrs)
        if isinstance(out, list):
            return [cls(o, inputs, parsed, op) for o in out]
        return cls(out, inputs, parsed, op)


def _declared(op, node: Eager) -> Eager:
    """``node`` as autograd keeps it: only the values the op's gradient declares it reads."""
    grad_inputs, grad_output = op.grad_saves(node.attrs)
    keep = range(len(node.inputs)) if grad_inputs is None else grad_inputs
    inputs = [x if i in keep else x.hollow() for i, x in enumerate(node.inputs)]
    out = Eager(node.data if grad_output else None, inputs, node.attrs, node.op, like=(node.shape, node.dtype))
    return out


def gradient_check(case: Case, seed: int = 0, eps: float = 1e-6) -> None:
    """The op's ``gradient`` (run as kernels, float64) against central differences
    of ``sum(w * op(x))`` for a random ``w``."""
    op = get_op(case.op)
    rng = np.random.default_rng(seed)
    dtypes = case.dtype_list("float64")
    arrays = random_inputs(case, rng, dtypes)
    node = Eager._kiln_apply(op, [Eager(a) for a in arrays], case.attrs)
    outs = as_list(node)
    node = _declared(op, outs[0]) if len(outs) == 1 else node
    outs = [node] if len(outs) == 1 else outs
    weights = [rng.uniform(-1, 1, o.shape) for o in outs]
    if len(outs) == 1:
        grads = op.gradient(Eager(weights[0]), node)
    else:
        # multi-output ops take a list of output grads; ``node`` is the first output
        grads = op.gradient([Eager(w) for w in weights], outs[0])

    def objective(xs):
        res = as_list(op.reference(*xs, **op.parse_attrs(case.attrs)))
        return sum(float(np.sum(w * r)) for w, r in zip(weights, res))

    which = case.grad_inputs if case.grad_inputs is not None else [
        i for i, d in enumerate(dtypes) if d == "float64"]
    for i in which:
        assert grads[i] is not None, f"{case}: no gradient for input {i}"
        got = np.asarray(grads[i].data)
        assert got.shape == arrays[i].shape, f"{case}: gradient {i} shape {got.shape} != {arrays[i].shape}"
        want = np.zeros_like(arrays[i])
        flat = arrays[i].reshape(-1)
        for j in range(flat.size):
            keep = flat[j]
            flat[j] = keep + eps
            up = objective(arrays)
            flat[j] = keep - eps
            down = objective(arrays)
            flat[j] = keep
            want.reshape(-1)[j] = (up - down) / (2 * eps)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"{case}: gradient of input {i}")


def run_cli(argv, capsys) -> tuple[int, str, str]:
    """``kiln argv`` in this process: (exit status, stdout, stderr)."""
    from kiln.cli import main

    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's usage errors exit from parse_args
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def cli_error(capsys, argv, needle: str) -> str:
    """``kiln argv`` exits 2 with one ``kiln: error:`` line naming ``needle``; returns the line."""
    code, _, err = run_cli(argv, capsys)
    assert code == 2, err
    assert err.startswith("kiln: error:") and needle in err, err
    assert "Traceback" not in err and err.count("\n") == 1, err
    return err


def conv_blocks(x_shape, w_shape, padding=1) -> tuple[int, int]:
    """(channel block, blocks) in which an exported NCHW conv2d with a constant
    weight, direct or Winograd, writes its output on ``kiln.cpu()``: the rule
    tests derive their expectations from (an AVX2 target's blocks are not an
    AVX-512 one's)."""
    from kiln.schedules.cpu.conv2d_defaults import packed_channels

    workload = get_op("conv2d").check([x_shape, w_shape], attrs={"padding": padding})
    block = packed_channels(workload, kiln.cpu())
    return block, -(-w_shape[0] // block)


# -- exported graphs (test_graph*.py) --------------------------------------------------------------
#: batch sizes an exported model is checked at
BATCHES = (1, 7, 64)


def bn_stats(model, x):
    """Move BatchNorm's running statistics away from (0, 1) with a training pass."""
    model.train()
    model(kiln.Tensor(x))
    model.eval()
    return model


def exported_matches(model, x, tmp_path, rtol=1e-5):
    """Export ``model`` and check it against its eager forward at each of ``BATCHES``."""
    predictor = Predictor(kiln.export(model, x[:1], tmp_path / "m.so"))
    for batch in BATCHES:
        want = model(kiln.Tensor(x[:batch])).numpy()
        got = predictor(x[:batch])
        scale = np.max(np.abs(want)) + 1e-12
        assert np.max(np.abs(got - want)) / scale < rtol, batch
    return predictor


def node_names(graph):
    """The graph's node names, in order."""
    return [n.name for n in graph.nodes]
