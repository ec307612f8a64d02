"""``lstm_cell_grad`` on the CPU: one pass per row, each gate's columns apart.

The op (``te/recurrent.py``) computes ``dC`` once per element in a stage of
its own (``_state``: the four gates' activations and tanh(c')), then each
of the four gate columns of ``dgates`` from it, and ``dc`` after them. The
generic template inlines the stage, so every gate column would compute all
five activations again, and fuses the columns into one vectorized loop,
whose vectors evaluate the four gates' formulas and blend them. Here a
task is a row: its ``dC``, then its four gate blocks unrolled (each block a
gate whose formula is a constant of it, activating only what that formula
reads), vectorized along the state, then its ``dc``.

``parallel``  1 to spread the rows over the thread pool (default: when
              ``dgates`` has at least ``PARALLEL_MIN`` elements, or a
              symbolic batch).

It applies where the state's width is static, two or more whole vectors,
and the kernel is the op's three blocks alone (others get the generic
template). Figures:
benchmarks/RESULTS.md, "Training steps on emeraldrapids".
"""
from __future__ import annotations

from ..config import Config
from ..dispatch import NOT_APPLICABLE, NotApplicable, register_template
from ..generic import PARALLEL_MIN
from ..util import blocks, find_block


@register_template("cpu", ops=("lstm_cell_grad",))
def schedule_lstm_cell_grad(sch, block, cfg: Config) -> NotApplicable | None:
    workload = cfg.workload
    name = workload.op.name
    rows, hidden = workload.shapes[1]
    state, carry, dgates = find_block(sch, name + "_state"), find_block(sch, name + "_c"), block
    lanes = cfg.target.lanes(workload.out_dtypes[0])
    if not isinstance(hidden, int) or hidden % lanes or hidden == lanes or None in (state, carry) \
            or len(blocks(sch)) != 3:
        return NOT_APPLICABLE
    par = cfg.define_knob("parallel", (0, 1), default=int(not isinstance(rows, int)
                                                          or rows * 4 * hidden >= PARALLEL_MIN))
    n, j = sch.get_loops(state)  # a row's dC first; its gate columns and its dc follow under the same row
    if par:
        sch.parallel(n)
    _vectors(sch, j, lanes)
    sch.reverse_compute_at(dgates, n)
    gate, j = sch.split(sch.get_loops(dgates)[-1], [4, hidden])
    sch.unroll(gate)
    _vectors(sch, j, lanes)
    sch.reverse_compute_at(carry, n)
    _vectors(sch, sch.get_loops(carry)[-1], lanes)
    return None


def _vectors(sch, loop, lanes: int) -> None:
    """A row of several whole vectors, split into them (TVM's
    common-subexpression pass fails on this kernel's rows vectorized whole,
    a row of one vector among them: those get the generic template)."""
    sch.vectorize(sch.split(loop, [None, lanes])[1])
