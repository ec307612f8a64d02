"""Every registered op at every vector width: the op-table case of each op
with the last dim of its inputs set to 1, 3, 7, 8, 10, 16, 24, 100 and 1000
(each a different remainder against 4, 8 and 16 lanes), built for a CPU of
each x86 vector width (``kiln.runtime.device.vector_levels``: the host's, and
an AVX2 or AVX-512 stand-in) and, where this machine can run it, checked
against the numpy reference. A width the host cannot run (AVX-512 on an AVX2
host) is compiled only: LLVM builds for any CPU.

A dim an op's shape rules refuse with that case (a reshape's fixed target, a
conv's kernel wider than the map) is taken from the op's next case that
accepts it; ``test_the_sweep_reaches_every_op`` says how many dims each op
got. Failures are collected per op, all at once.
"""
from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.errors import KilnError
from kiln.runtime.device import vector_levels
from kiln.te import get_op, list_ops

from cases import CASES
from helpers import Case, TOL, as_list, random_inputs

LAST_DIMS = (1, 3, 7, 8, 10, 16, 24, 100, 1000)
LEVELS = vector_levels()


def _with_last_dim(case: Case, d: int) -> Case | None:
    """The case with ``d`` for its first input's last dim: first in every
    input whose last dim is the same (broadcast operands stay paired), else
    wherever that dim appears (a dense's K in both operands); None where the
    op refuses both."""
    if not case.shapes or not case.shapes[0] or not isinstance(case.shapes[0][-1], int):
        return None
    base = case.shapes[0][-1]
    last = [tuple(s[:-1]) + (d,) if len(s) and s[-1] == base else tuple(s) for s in case.shapes]
    everywhere = [tuple(d if n == base else n for n in s) for s in case.shapes]
    for shapes in (last, everywhere):
        try:
            get_op(case.op).check(shapes, case.dtype_list(), case.attrs)
        except KilnError:
            continue
        return Case(case.op, shapes, case.dtypes, case.attrs, case.low, case.high, case.make, case.grad,
                    case.grad_inputs)
    return None


def sweep(op: str) -> dict[int, Case]:
    """``{last dim: case}`` for ``op``: the first table case accepting each dim."""
    found = {}
    for d in LAST_DIMS:
        for case in (c for c in CASES if c.op == op):
            variant = _with_last_dim(case, d)
            if variant is not None:
                found[d] = variant
                break
    return found


def _check(case: Case, target) -> str | None:
    """None if the case builds for ``target`` (and, where it runs here, matches numpy), else why not."""
    op = get_op(case.op)
    dtypes = case.dtype_list()
    try:
        kernel = kiln.build(case.op, case.shapes, dtypes, case.attrs, target=target)
        if not target.runs_here:
            return None
        arrays = random_inputs(case, np.random.default_rng(0), dtypes)
        got = as_list(kernel(*arrays))
    except KilnError as exc:
        return f"{case} on {target}: {str(exc)[:300]}"
    want = as_list(op.reference(*arrays, **op.parse_attrs(case.attrs)))
    if op.data_dependent:  # the actual rows within the bound: compared by test_ops
        got, want = got[:1], want[:1]
    tol = TOL.get(dtypes[0], TOL["float32"])
    for g, w in zip(got, want):
        w = np.asarray(w)
        if g.shape != w.shape:
            return f"{case} on {target}: shape {g.shape}, numpy's {w.shape}"
        if g.dtype.kind == "f" and not np.allclose(g, w, equal_nan=True, **tol):
            worst = np.nanmax(np.abs(g.astype("float64") - w)) if g.size else 0.0
            return f"{case} on {target}: off by up to {worst:.3g}"
        if g.dtype.kind != "f" and not np.array_equal(g, w):
            return f"{case} on {target}: differs from numpy"
    return None


@pytest.mark.parametrize("op", list_ops())
def test_every_op_builds_and_matches_numpy_at_every_last_dim_and_width(op):
    failures = [why for case in sweep(op).values() for target in LEVELS if (why := _check(case, target))]
    assert not failures, f"{len(failures)} failed:\n" + "\n".join(failures)


#: ops whose attributes fix their input's shape (the gradient's ``shape``): the op table's cases
#: run them at every width (test_ops)
FIXED_SHAPE = {"avg_pool2d_grad", "getitem_grad"}
#: ops whose inputs' last dims are tied otherwise than equal (an LSTM step's gates are 4x its state's width): the
#: op table's cases give them widths of every remainder (tests/cases/recurrent.py)
TIED_WIDTHS = {"lstm_cell", "lstm_cell_grad"}


def test_the_sweep_reaches_every_op():
    reached = {op: sorted(sweep(op)) for op in list_ops()}
    assert {op for op, dims in reached.items() if not dims} == FIXED_SHAPE | TIED_WIDTHS
    # at least the widths' remainders: a dim below a vector, one of each width, and a long odd one
    assert sum(len(dims) >= 5 for dims in reached.values()) >= len(reached) * 3 // 4, reached
