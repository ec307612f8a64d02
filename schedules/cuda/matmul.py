"""CUDA template for matmul, batched matmul and dense: the two levels of the
classic GPU GEMM.

Block level: a thread block computes an ``L_m x L_n`` output tile
(``L_m = threads_m * tile_m``, ``L_n = threads_n * tile_n``). The reduction
runs in slices of ``tile_k``: the block's ``L_m x tile_k`` slice of A and
``tile_k x L_n`` slice of B are copied to shared memory by all its threads
together (cooperative fetching, ``vector`` elements per load), TVM inserts
the ``__syncthreads()`` around them, and the threads compute from shared
memory.

Thread level: each thread keeps a ``tile_m x tile_n`` output tile in
registers; for every k of the slice it loads ``tile_m`` values of A and
``tile_n`` of B from shared memory into registers and does
``tile_m * tile_n`` FMAs.

For an ``N^3`` matmul with square tiles the global->shared traffic is
``2 N^3 / L`` and the shared->register traffic ``2 N^3 / V`` (``kiln show
--target cuda --traffic`` prints both for the chosen config).

Knobs: ``threads_m``, ``threads_n`` (the thread grid), ``tile_m``,
``tile_n`` (each thread's register tile), ``tile_k`` (the staged slice),
``vector`` (elements per cooperative load), ``unroll`` (auto-unroll limit).
Static shapes the tiles do not divide are padded; the padding is folded into
the shared-memory fetch and cut off at the write-back.
"""
from __future__ import annotations

from ..config import Config
from ..dispatch import register_template
from ..util import blocks, const_int, extent, is_reduction, try_inline
from .common import pow2_at_least, stage_and_finish, vector_knob

#: hand-chosen defaults per architecture: (threads_m, threads_n, tile_m, tile_n, tile_k)
DEFAULTS = {"sm_80": (16, 16, 8, 8, 8), "sm_90": (16, 16, 8, 8, 16)}


def _fit(defaults, m, n, k):
    """Shrink the default tiles for small problems (a 128-wide tile over 10 columns is mostly padding)."""
    tm, tn, vm, vn, tk = defaults
    if m is not None:
        vm = min(vm, pow2_at_least(-(-m // tm), vm))
        tm = min(tm, pow2_at_least(-(-m // vm), tm))
    if n is not None:
        vn = min(vn, pow2_at_least(-(-n // tn), vn))
        tn = min(tn, pow2_at_least(-(-n // vn), tn))
    if k is not None:
        tk = min(tk, pow2_at_least(k, tk))
    return tm, tn, vm, vn, tk


@register_template("cuda", ops=("matmul", "dense"))
def schedule_matmul_cuda(sch, block, cfg: Config) -> None:
    red = next(b for b in blocks(sch) if is_reduction(sch, b))
    loops = sch.get_loops(red)
    nbatch = len(loops) - 3
    m_ext, n_ext, k_ext = (const_int(extent(sch, lp)) for lp in loops[-3:])
    tm0, tn0, vm0, vn0, tk0 = _fit(DEFAULTS.get(cfg.target.arch, DEFAULTS["sm_80"]), m_ext, n_ext, k_ext)
    threads_m = cfg.define_knob("threads_m", (1, 2, 4, 8, 16, 32), default=tm0)
    threads_n = cfg.define_knob("threads_n", (1, 2, 4, 8, 16, 32), default=tn0)
    tile_m = cfg.define_knob("tile_m", (1, 2, 4, 8), default=vm0)
    tile_n = cfg.define_knob("tile_n", (1, 2, 4, 8), default=vn0)
    tile_k = cfg.define_knob("tile_k", (1, 2, 4, 8, 16, 32), default=tk0)
    vector = vector_knob(cfg, "vector", cfg.workload.dtypes[0], default=4)
    block_m, block_n = threads_m * tile_m, threads_n * tile_n

    pads = [block_m if m_ext else 1, block_n if n_ext else 1, tile_k if k_ext else 1]
    if any(e and e % p for e, p in zip((m_ext, n_ext, k_ext), pads)):
        sch.pad_einsum(red, [1] * nbatch + pads)
    a_src, b_src = (str(sch.get(red).reads[i].source.name) for i in (0, 1))
    a_shared = sch.cache_read(red, 0, "shared")
    b_shared = sch.cache_read(red, 1, "shared")
    for staged, source in ((a_shared, a_src), (b_shared, b_src)):
        for producer in sch.get_producers(staged):  # the padding copy goes into the fetch
            if sch.get(producer).name_hint == source:
                try_inline(sch, producer)
    a_local = sch.cache_read(red, 0, "local")
    b_local = sch.cache_read(red, 1, "local")
    acc = sch.cache_write(red, 0, "local")

    loops = sch.get_loops(red)
    batch, (m, n, k) = loops[:-3], loops[-3:]
    mb, mt, mi = sch.split(m, [None, threads_m, tile_m])
    nb, nt, ni = sch.split(n, [None, threads_n, tile_n])
    ko, ki = sch.split(k, [None, tile_k])
    sch.reorder(*batch, mb, nb, mt, nt, ko, ki, mi, ni)
    by = sch.fuse(*batch, mb) if batch else mb
    sch.bind(by, "blockIdx.y")
    sch.bind(nb, "blockIdx.x")
    stage_and_finish(sch, red, acc, ((mt, nt), (threads_m, threads_n)), ko, ki,
                     [(a_shared, a_local), (b_shared, b_local)], vector, cfg)
