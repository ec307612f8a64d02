"""CPU template for matmul, batched matmul and dense (with its bias/relu epilogue).

The classic GEMM recipe, one knob per decision:

``tile_m``    rows of the register tile (default 8): each loaded B vector is
              reused for ``tile_m`` FMAs.
``tile_n``    columns of the register tile, a multiple of the vector lanes
              (default 2 vectors): ``tile_m * tile_n / lanes`` accumulators
              live in registers, and each broadcast A element feeds
              ``tile_n / lanes`` FMAs. Loads per FMA drop from 2 to
              1/tile_m + 1/tile_n (in vectors).
``unroll_k``  k steps unrolled inside the micro-kernel (default 4).
``tile_k``    k block (default: the largest divisor of K, a multiple of
              ``unroll_k``, up to 64): the A rows and the B panel slice of one
              block stay in L1.
``pack_b``    1 to copy B into panels ``[N / tile_n, K, tile_n]`` first, so the
              micro-kernel streams B contiguously (default 1 for static shapes).
``parallel``  1 to run (batch, n-block, m-block) tiles on the thread pool.

Shapes that the tiles do not divide are padded (``pad_einsum``) instead of
predicated, so odd sizes (1000, 129, 10) keep the fast micro-kernel; the
padding is cut off again where the accumulator tile is written back, which is
also where the dense epilogue (bias, relu) is computed.
"""
from __future__ import annotations

from ..config import Config
from ..dispatch import register_template
from ..generic import schedule_injective
from ..util import blocks, const_int, extent, is_reduction, pow2_floor, try_inline

K_BLOCK_MAX = 64


def _round_up(x: int, f: int) -> int:
    return -(-x // f) * f


def _k_blocks(k: int, unroll: int) -> list[int]:
    return [d for d in range(unroll, k + 1, unroll) if k % d == 0]


@register_template("cpu", ops=("matmul", "dense"))
def schedule_matmul(sch, block, cfg: Config) -> None:
    red = next(b for b in blocks(sch) if is_reduction(sch, b))
    loops = sch.get_loops(red)
    nbatch = len(loops) - 3
    m_ext, n_ext, k_ext = (const_int(extent(sch, lp)) for lp in loops[-3:])
    lanes = cfg.target.lanes(str(sch.get(red).writes[0].source.dtype))

    tile_n = cfg.define_knob("tile_n", tuple(lanes * v for v in (1, 2, 3, 4)),
                             default=lanes * (2 if n_ext is None or n_ext > lanes else 1))
    tile_m = cfg.define_knob("tile_m", (1, 2, 4, 6, 8, 12, 16), default=8 if m_ext is None else min(8, pow2_floor(m_ext)))
    unroll_k = cfg.define_knob("unroll_k", (1, 2, 4, 8), default=4 if k_ext is None or k_ext >= 4 else 1)
    static = None not in (m_ext, n_ext, k_ext)
    b_is_matrix = len(sch.get(red).reads[1].source.shape) >= 2
    pack_b = cfg.define_knob("pack_b", (0, 1), default=int(static and b_is_matrix)) and b_is_matrix
    par = cfg.define_knob("parallel", (0, 1), default=1)

    pads = [1] * nbatch + [tile_m if m_ext else 1, tile_n if n_ext else 1, unroll_k if k_ext else 1]
    if any(e and e % p for e, p in zip((m_ext, n_ext, k_ext), pads[-3:])):
        sch.pad_einsum(red, pads)
    k_pad = _round_up(k_ext, unroll_k) if k_ext else None
    k_opts = tuple(_k_blocks(k_pad, unroll_k)) if k_pad else (unroll_k,)
    tile_k = cfg.define_knob("tile_k", k_opts, default=max(d for d in k_opts if d <= K_BLOCK_MAX) if k_pad and min(
        k_opts) <= K_BLOCK_MAX else k_opts[0])

    if pack_b:
        b_source = _read_name(sch, red, 1)
        pack = sch.cache_read(red, 1, "global")
        if cfg.workload["attrs"].get("transpose_b"):  # B is read as b[..., n, k]
            layout = lambda *i: (*i[:-2], i[-2] // tile_n, i[-1], i[-2] % tile_n)  # noqa: E731
        else:
            layout = lambda *i: (*i[:-2], i[-1] // tile_n, i[-2], i[-1] % tile_n)  # noqa: E731
        sch.transform_layout(red, ("read", 1), layout)
        for producer in sch.get_producers(pack):  # B's padding goes into the pack
            if sch.get(producer).name_hint == b_source:
                try_inline(sch, producer)

    loops = sch.get_loops(red)
    batch, (m, n, k) = loops[:-3], loops[-3:]
    mo, mi = sch.split(m, [None, tile_m])
    no, ni = sch.split(n, [None, tile_n])
    ko, ki = sch.split(k, [None, tile_k])
    ku, kk = sch.split(ki, [None, unroll_k])
    sch.reorder(*batch, no, mo, ko, ku, kk, mi, ni)
    acc = sch.cache_write(red, 0, "local")
    sch.reverse_compute_at(acc, mo)
    sch.vectorize(ni)  # before decompose_reduction (TVM rejects it after)
    sch.unroll(mi)
    sch.unroll(kk)
    outer = sch.fuse(*batch, no, mo)
    if par:
        sch.parallel(outer)
    sch.decompose_reduction(red, ko)

    _write_back(sch, acc, lanes, cfg)
    if pack_b:
        _flat_parallel(sch, pack, lanes)
    for b in blocks(sch):  # what is left: A's padding copy
        if b is not acc and not is_reduction(sch, b) and sch.get(b).name_hint.endswith("_pad"):
            schedule_injective(sch, b, cfg, "pad.")


def _read_name(sch, block, index: int) -> str:
    return str(sch.get(block).reads[index].source.name)


def _write_back(sch, acc, lanes: int, cfg: Config) -> None:
    """Fold the un-padding and the epilogue (dense bias/relu, 1-D squeeze) into
    the block that writes the accumulator tile back, and vectorize it."""
    while True:
        consumers = sch.get_consumers(acc)
        if not consumers:
            break
        try:
            sch.reverse_compute_inline(consumers[0])
        except Exception:  # noqa: BLE001 - e.g. a rank-changing squeeze: schedule it on its own
            schedule_injective(sch, consumers[0], cfg, "epilogue.")
            break
    own = sch.get_loops(acc)[1:]  # below the parallel tile loop
    if not own:
        return
    inner = sch.fuse(*own) if len(own) > 1 else own[0]
    _, vec = sch.split(inner, [None, lanes])
    sch.vectorize(vec)


def _flat_parallel(sch, block, lanes: int) -> None:
    loops = sch.get_loops(block)
    fused = sch.fuse(*loops) if len(loops) > 1 else loops[0]
    outer, vec = sch.split(fused, [None, lanes])
    sch.vectorize(vec)
    sch.parallel(outer)
