"""Small helpers over ``tvm.s_tir.Schedule`` shared by the templates."""
from __future__ import annotations

from tvm import tirx
from tvm.s_tir.stmt import SBlockRealize

from ..te.shapes import static

REDUCE = 2  # tirx.IterVar.CommReduce


def blocks(sch) -> list:
    """Every block of the function except the root, in program order."""
    root = sch.get_sblock("root") if _has_root(sch) else None
    out = []
    for child in sch.get_child_blocks(root) if root is not None else []:
        out.append(child)
    return out


def _has_root(sch) -> bool:
    try:
        sch.get_sblock("root")
        return True
    except Exception:  # noqa: BLE001 - TVM raises a generic error for a missing block
        return False


def block_name(sch, block) -> str:
    return sch.get(block).name_hint


def find_block(sch, suffix: str):
    """The first block whose name ends with ``suffix`` (a stage the op may or
    may not have: ``_pad`` without padding), or None."""
    return next((b for b in blocks(sch) if block_name(sch, b).endswith(suffix)), None)


def is_reduction(sch, block) -> bool:
    return any(int(iv.iter_type) == REDUCE for iv in sch.get(block).iter_vars)


def loop_kinds(sch, block) -> list[bool]:
    """For each loop around ``block``: True when it runs over the block's
    reduction axes only. Read from the block's bindings, so it holds after
    ``compute_at`` or a fuse, where loops and iter vars no longer pair up."""
    loops = sch.get_loops(block)
    if not loops:
        return []
    body = sch.get(loops[-1]).body
    name = block_name(sch, block)
    realize = next(s for s in (body.seq if isinstance(body, tirx.SeqStmt) else [body])
                   if isinstance(s, SBlockRealize) and s.block.name_hint == name)
    reduce, spatial = [], []
    for iv, value in zip(realize.block.iter_vars, realize.iter_values):
        (reduce if int(iv.iter_type) == REDUCE else spatial).extend(tirx.analysis.undefined_vars(value))
    uses = lambda var, group: any(var.same_as(v) for v in group)  # noqa: E731
    return [uses(v, reduce) and not uses(v, spatial) for v in (sch.get(lp).loop_var for lp in loops)]


def split_loops(sch, block) -> tuple[list, list]:
    """The loops around ``block``: those over its kept axes and those over
    its reduced axes only (``loop_kinds``), each in order."""
    loops, kinds = sch.get_loops(block), loop_kinds(sch, block)
    return [lp for lp, r in zip(loops, kinds) if not r], [lp for lp, r in zip(loops, kinds) if r]


def extent(sch, loop):
    """A loop's extent: an int when static, else the symbolic expression."""
    return static(sch.get(loop).extent)


def is_output(sch, block) -> bool:
    """Whether the block writes a function output (no block reads what it writes)."""
    return len(sch.get_consumers(block)) == 0


def try_inline(sch, block) -> bool:
    try:
        sch.compute_inline(block)
        return True
    except Exception:  # noqa: BLE001 - not inlinable (e.g. reads itself); keep the block
        return False


def fold_consumers(sch, block):
    """Inline the chain of consumers of ``block`` into it (un-padding, an
    epilogue); return the first consumer that cannot be folded, or None."""
    while True:
        consumers = sch.get_consumers(block)
        if not consumers:
            return None
        try:
            sch.reverse_compute_inline(consumers[0])
        except Exception:  # noqa: BLE001 - e.g. a rank-changing squeeze
            return consumers[0]


def work(sch, loops) -> int | None:
    """Iterations of a loop nest (None when an extent is symbolic)."""
    total = 1
    for loop in loops:
        n = const_int(extent(sch, loop))
        if n is None:
            return None
        total *= n
    return total


def const_int(expr) -> int | None:
    value = static(expr)
    return value if isinstance(value, int) else None


def divisors(n: int | None) -> tuple:
    """The divisors of ``n`` (``(1,)`` for a symbolic or zero ``n``): tile
    counts for a split with no tail, which would leave an accumulator tile's
    write-back without its bounds check."""
    return tuple(d for d in range(1, n + 1) if n % d == 0) if n else (1,)


def pow2_floor(n: int) -> int:
    return 1 << (max(1, n).bit_length() - 1)


__all__ = ["blocks", "block_name", "is_reduction", "loop_kinds", "split_loops", "extent", "is_output", "try_inline",
           "fold_consumers", "work", "const_int", "divisors", "pow2_floor", "tirx"]


def merge_nests(sch, block) -> None:
    """Make the loop nests of every block one nest, ``block``'s (each block
    a stage over the same shape, as the fused optimizer updates declare):
    the stages stay in program order in its body, so a later stage reads
    what an earlier one wrote at the same index."""
    stages = blocks(sch)
    if len(stages) > 1:
        for depth in range(len(sch.get_loops(block))):
            sch.merge(*[sch.get_loops(b)[depth] for b in stages])
