"""Helpers shared by the CUDA templates: binding loops to the grid, the
cooperative fetch of a staged tile, and folding the epilogue into the
write-back of a thread's register tile."""
from __future__ import annotations

from ..config import Config
from ..util import block_name, blocks, const_int, extent

MAX_THREADS = 1024


def pow2_at_least(n: int, cap: int) -> int:
    p = 1
    while p < n and p < cap:
        p *= 2
    return p


def bind_flat(sch, block, cfg: Config, prefix: str = "") -> None:
    """Fuse a block's loops and spread them over ``blocks x threads`` (x
    ``vector`` elements per thread when the vector divides the work)."""
    loops = sch.get_loops(block) or [sch.add_unit_loop(block)]
    fused = sch.fuse(*loops) if len(loops) > 1 else loops[0]
    n = const_int(extent(sch, fused))
    threads = cfg.define_knob(prefix + "threads", (64, 128, 256, 512, 1024),
                              default=256 if n is None else min(256, max(64, pow2_at_least(n, 1024))))
    vec = cfg.define_knob(prefix + "vector", (1, 2, 4), default=4 if n is not None and n % (4 * threads) == 0 else 1)
    if vec > 1 and (n is None or n % vec):
        vec = 1  # a vector with a tail would need a predicate per lane
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


def write_back(sch, acc, depth: int) -> None:
    """Fold the un-padding and the epilogue (dense bias/relu) into the block
    writing a thread's register tile back to global memory."""
    while True:
        consumers = sch.get_consumers(acc)
        if not consumers:
            break
        try:
            sch.reverse_compute_inline(consumers[0])
        except Exception:  # noqa: BLE001 - a consumer that cannot be folded runs as its own kernel
            break
    own = sch.get_loops(acc)[depth:]
    if len(own) > 1:
        sch.fuse(*own)


def unroll(sch, loop, cfg: Config, prefix: str = "") -> None:
    """``unroll``: TVM's auto-unroll limit on the loops under ``loop`` (0: none)."""
    steps = cfg.define_knob(prefix + "unroll", (0, 16, 64, 512), default=64)
    if steps:
        sch.annotate(loop, "pragma_auto_unroll_max_step", steps)
        sch.annotate(loop, "pragma_unroll_explicit", 1)
