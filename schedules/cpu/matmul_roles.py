"""The roles of a matmul's loops, read once before the CPU matmul templates
(``matmul.py``) change anything: the reduction block, what its batch, row,
column and reduction loops run over, and its operands' element type.

``matmul`` and ``dense`` lay the block out as ``batch..., m, n, k``;
``dense_packed``, whose B is already in panels, as ``m, panel, lane, k``.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..util import blocks, const_int, extent, is_reduction


@dataclass(frozen=True)
class MatmulRoles:
    """A matmul's reduction block ``red`` and its loops' extents: ``batch``
    (one per batch dim), ``m`` rows, ``n`` columns, ``k`` the reduction
    (None where symbolic). ``panel`` is the width of B's panels where B is
    already in them (``dense_packed``), else None. ``a_matrix`` and
    ``b_matrix``: whether each operand has two dims or more (a 1-D one is a
    row or a column, nothing to pack)."""

    red: object
    batch: tuple
    m: int | None
    n: int | None
    k: int | None
    panel: int | None
    dtype: str
    lanes: int
    elem: int
    a_matrix: bool
    b_matrix: bool


def matmul_roles(sch, cfg, panels: bool = False) -> MatmulRoles:
    """The roles of the loops of the function's reduction block; ``panels``:
    B is already in panels (``m, panel, lane, k``)."""
    red = next(b for b in blocks(sch) if is_reduction(sch, b))
    loops = sch.get_loops(red)
    nbatch = len(loops) - 3 - panels
    m, k = (const_int(extent(sch, lp)) for lp in (loops[nbatch], loops[-1]))
    if panels:
        count, width = (const_int(extent(sch, lp)) for lp in loops[-3:-1])
        n = count * width if count else None
    else:
        width, n = None, const_int(extent(sch, loops[-2]))
    dtype = str(sch.get(red).writes[0].source.dtype)
    a_matrix, b_matrix = (len(sch.get(red).reads[i].source.shape) >= 2 for i in (0, 1))
    return MatmulRoles(red=red, batch=tuple(const_int(extent(sch, lp)) for lp in loops[:nbatch]), m=m, n=n, k=k,
                       panel=width, dtype=dtype, lanes=cfg.target.lanes(dtype),
                       elem=max(1, int("".join(c for c in dtype if c.isdigit()) or 32) // 8),
                       a_matrix=a_matrix, b_matrix=b_matrix)
