"""CPU template for softmax and log_softmax over the last axis: one parallel
task per block of rows, each row's max, sum of exponentials and output
computed back to back while the row is in cache.

``vector``    lanes of the vectorized loops (default: the target's lanes);
              the row max and sum keep ``vector`` partial results (rfactor)
              when the row length is a multiple of it.
``parallel``  1 to spread rows over the thread pool.

Softmax over another axis is declined: dispatch gives it the generic template.
"""
from __future__ import annotations

from ..config import Config
from ..dispatch import NOT_APPLICABLE, NotApplicable, register_template
from ..util import const_int, extent


@register_template("cpu", ops=("softmax", "log_softmax"))
def schedule_softmax(sch, block, cfg: Config) -> NotApplicable | None:
    ndim = len(cfg.workload.shapes[0])
    if cfg.workload.attrs["axis"] % ndim != ndim - 1:
        return NOT_APPLICABLE
    lanes = cfg.target.lanes(cfg.workload.dtypes[0])
    loops = sch.get_loops(block)
    row_len = const_int(extent(sch, loops[-1]))
    vec = cfg.define_knob("vector", (1, lanes, 2 * lanes), default=lanes if row_len is None or row_len >= lanes else 1)
    par = cfg.define_knob("parallel", (0, 1), default=1)

    rows = sch.fuse(*loops[:-1]) if len(loops) > 2 else loops[0]
    if vec > 1:
        _, inner = sch.split(loops[-1], [None, vec])
        sch.vectorize(inner)
    if par:
        sch.parallel(rows)
    row_max, row_sum = sch.get_sblock("row_max"), sch.get_sblock("row_sum")
    exp_stage = _find(sch, "row_exp")  # softmax: exp(x - max), computed once per element
    use_rf = vec > 1 and row_len is not None and row_len % vec == 0 and row_len > vec  # one slice: nothing to split
    sum_rf, max_rf = (_rfactor(sch, stage, vec) if use_rf else None for stage in (row_sum, row_max))
    # compute_at needs a block's consumers placed first, so go from the output backwards.
    for stage in (row_sum, sum_rf, exp_stage, row_max, max_rf):
        if stage is not None:
            sch.compute_at(stage, rows)
    if exp_stage is not None and vec > 1:
        _, inner = sch.split(sch.get_loops(exp_stage)[-1], [None, vec])
        sch.vectorize(inner)
    for stage, rf in ((row_sum, sum_rf), (row_max, max_rf)):
        if rf is None:
            sch.decompose_reduction(stage, sch.get_loops(stage)[-1])
            continue
        # compute_at regenerated the partials' loops as [partial-result axis, r_outer].
        r_vec, r_outer = sch.get_loops(rf)[-2:]
        sch.reorder(r_outer, r_vec)
        sch.vectorize(r_vec)
        sch.decompose_reduction(rf, r_outer)


def _rfactor(sch, stage, vec: int):
    """Split a row reduction into ``vec`` partial results (a new block)."""
    r = sch.get_loops(stage)[-1]
    _, r_inner = sch.split(r, [None, vec])
    return sch.rfactor(r_inner, factor_axis=len(sch.get(stage).iter_vars) - 1)


def _find(sch, name: str):
    try:
        return sch.get_sblock(name)
    except Exception:  # noqa: BLE001 - TVM raises a generic error for a missing block
        return None
