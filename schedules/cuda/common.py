"""Helpers shared by the CUDA templates: binding loops to the grid, the
cooperative fetch of a staged tile, and folding the epilogue into the
write-back of a thread's register tile."""
from __future__ import annotations

import numpy as np
import tvm
from tvm import tirx

from ...te.shapes import dtype_of
from ..config import Config
from ..util import block_name, blocks, const_int, extent, fold_consumers, try_inline
from .check import MAX_VECTOR_BYTES


def pow2_at_least(n: int, cap: int) -> int:
    p = 1
    while p < n and p < cap:
        p *= 2
    return p


#: what TVM's CUDA code generator cannot emit on vectors: an equality of two
#: ``float4`` (``x != x``, the NaN test in ``exp`` and ``maximum``), logic on
#: bool vectors, or a bool vector cast to ``float4`` (an ordering test and a
#: select on it are fine: ``relu`` vectorizes)
_SCALAR_ONLY = (tirx.EQ, tirx.NE, tirx.Not, tirx.And, tirx.Or)
_SCALAR_CALLS = ("tirx.if_then_else", "tirx.isnan", "tirx.isinf", "tirx.isfinite")


def _scalar_only(expr) -> bool:
    if isinstance(expr, _SCALAR_ONLY) or isinstance(expr, tvm.ir.Call) and str(expr.op.name) in _SCALAR_CALLS:
        return True
    if isinstance(expr, tirx.Cast) and "bool" in (dtype_of(expr), dtype_of(expr.value)):
        return True
    fields = ("a", "b", "value", "body", "condition", "true_value", "false_value")
    children = [getattr(expr, f, None) for f in fields] + list(getattr(expr, "args", ()))
    return any(_scalar_only(c) for c in children if isinstance(c, tvm.ir.Expr))


def vector_knob(cfg: Config, name: str, dtype: str, default: int) -> int:
    """Elements per vector load: 1, 2 or 4, as many as fit ``MAX_VECTOR_BYTES`` of ``dtype``."""
    size = np.dtype(dtype).itemsize
    choices = tuple(v for v in (1, 2, 4) if v * size <= MAX_VECTOR_BYTES)
    return cfg.define_knob(name, choices, default=min(default, choices[-1]))


def vectorizable(sch, block) -> bool:
    """Whether the block's computation can run on CUDA vectors (none of ``_SCALAR_ONLY`` in it)."""
    store = sch.get(block).body
    return (isinstance(store, tirx.BufferStore) and str(store.buffer.dtype) != "bool"
            and not _scalar_only(store.value))


def bind_flat(sch, block, cfg: Config, prefix: str = "") -> None:
    """Fuse a block's loops and spread them over ``blocks x threads`` (x
    ``vector`` elements per thread when the vector divides the work and the
    block can be vectorized)."""
    loops = sch.get_loops(block) or [sch.add_unit_loop(block)]
    fused = sch.fuse(*loops) if len(loops) > 1 else loops[0]
    n = const_int(extent(sch, fused))
    threads = cfg.define_knob(prefix + "threads", (64, 128, 256, 512, 1024),
                              default=256 if n is None else min(256, max(64, pow2_at_least(n, 1024))))
    vec = vector_knob(cfg, prefix + "vector", str(sch.get(block).writes[0].source.dtype),
                      default=4 if n is not None and n % (4 * threads) == 0 else 1)
    if vec > 1 and (n is None or n % vec or not vectorizable(sch, block)):
        vec = 1  # a vector with a tail would need a predicate per lane; some stages CUDA cannot vectorize
    if vec > 1:
        bx, tx, vx = sch.split(fused, [None, threads, vec])
        sch.vectorize(vx)
    else:
        bx, tx = sch.split(fused, [None, threads])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")


def bind_rest(sch, cfg: Config) -> None:
    """Give every block not yet on the grid (a copy that could not be folded
    away, e.g. the squeeze of a 1-D matmul operand) a flat kernel of its own."""
    for block in blocks(sch):
        if not any(sch.get(lp).thread_binding is not None for lp in sch.get_loops(block)):
            bind_flat(sch, block, cfg, block_name(sch, block) + ".")


def cooperative_fetch(sch, block, depth: int, threads: tuple[int, int], vector: int) -> None:
    """The threads of a block copy a staged tile together: the copy's own
    loops (below the first ``depth``, where it was computed at) are fused and
    split into ``[rounds, ty, tx, vector]``."""
    own = sch.get_loops(block)[depth:]
    if not own:  # a tile of one element (a 1x1 weight of one channel in and out): a loop of one to split
        own = [sch.add_unit_loop(block)]
    fused = sch.fuse(*own) if len(own) > 1 else own[0]
    n = const_int(extent(sch, fused))
    ty, tx = threads
    if vector > 1 and (n is None or n % (ty * tx * vector)):
        vector = 1  # the tile does not split evenly into vector loads
    parts = sch.split(fused, [None, ty, tx, vector])
    sch.bind(parts[1], "threadIdx.y")
    sch.bind(parts[2], "threadIdx.x")
    if vector > 1:
        sch.vectorize(parts[3])


def stage_operands(sch, red, inline: tuple) -> tuple[list, object]:
    """Shared and register copies of the reduction's two operands, and its
    register tile: ``([(shared, local)] per operand, acc)``. The producer of
    each operand in ``inline`` (zero padding, a transpose) is folded into its
    shared-memory copy."""
    sources = [str(region.source.name) for region in sch.get(red).reads]
    shared = [sch.cache_read(red, k, "shared") for k in (0, 1)]
    for k in inline:
        for producer in sch.get_producers(shared[k]):
            if sch.get(producer).name_hint == sources[k]:
                try_inline(sch, producer)
    local = [sch.cache_read(red, k, "local") for k in (0, 1)]
    return list(zip(shared, local)), sch.cache_write(red, 0, "local")


def stage_and_finish(sch, red, acc, threads: tuple, slice_loop, step_loop, staged: list, vector: int,
                     cfg: Config) -> None:
    """The common end of the two-level templates, once the block loops are
    bound. ``threads``: the (y, x) thread loops and their extents; each
    ``(shared, local)`` pair in ``staged`` is fetched cooperatively into shared
    memory per ``slice_loop`` iteration and read into registers per
    ``step_loop`` iteration; ``acc`` (the register tile) is written back under
    the thread loops, with the un-padding and epilogue folded in."""
    (ty_loop, tx_loop), extents = threads
    sch.bind(ty_loop, "threadIdx.y")
    sch.bind(tx_loop, "threadIdx.x")
    unroll(sch, ty_loop, cfg)
    loops = [sch.get(lp) for lp in sch.get_loops(red)]
    grid = next(k for k, lp in enumerate(loops) if lp.same_as(sch.get(tx_loop))) + 1  # block and thread loops
    depth = next(k for k, lp in enumerate(loops) if lp.same_as(sch.get(slice_loop))) + 1
    sch.reverse_compute_at(acc, tx_loop)
    for _, local in staged:  # consumers first: compute_at needs them under the loop
        sch.compute_at(local, step_loop)
    for shared, _ in staged:
        sch.compute_at(shared, slice_loop)
        cooperative_fetch(sch, shared, depth, extents, vector)
    sch.decompose_reduction(red, slice_loop)
    fold_consumers(sch, acc)  # what cannot be folded gets its own kernel below
    own = sch.get_loops(acc)[grid:]
    if len(own) > 1:
        sch.fuse(*own)
    bind_rest(sch, cfg)


def unroll(sch, loop, cfg: Config, prefix: str = "") -> None:
    """``unroll``: TVM's auto-unroll limit on the loops under ``loop`` (0: none)."""
    steps = cfg.define_knob(prefix + "unroll", (0, 16, 64, 512), default=64)
    if steps:
        sch.annotate(loop, "pragma_auto_unroll_max_step", steps)
        sch.annotate(loop, "pragma_unroll_explicit", 1)
