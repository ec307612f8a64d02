"""The int8 kernels in AVX2 code (built for ``znver3``: ``vpmaddubsw`` with
7-bit weights) against the float kernels an export runs in the same code
(``dense_packed`` on a packed weight; the plain ``conv2d``), on this host —
any host that runs AVX2 code; the timing is this CPU's, not a Zen 3's.

Run: ``python benchmarks/int8_avx2.py [--mcpu znver3]``. Each int8 kernel's
output is checked against its numpy reference first.
"""
from __future__ import annotations

import argparse

import numpy as np

import kiln
from kiln.runtime.device import cpu
from kiln.strategy import choose
from kiln.te import get_op
from kiln.te.quantize import pack_int8_weight
from kiln.te.quantize_conv import pack_conv_int8_weight

DENSE = [(128, 768, 768), (1024, 768, 768), (1024, 768, 3072), (1024, 3072, 768)]
#: (batch, in channels, map size, out channels, kernel, padding)
CONV = [(1, 64, 56, 64, 3, 1), (1, 256, 14, 256, 3, 1), (1, 64, 56, 256, 1, 0), (8, 128, 28, 128, 3, 1)]


def _best(kernel, args, rounds: int = 3) -> float:
    return min(kernel.time(*args)["median"] for _ in range(rounds))


def _check(op: str, kernel, args, attrs: dict) -> None:
    want = get_op(op).reference(*args, **get_op(op).parse_attrs(attrs))
    assert np.abs(np.asarray(kernel(*args)) - want).max() <= 1e-4 * max(np.abs(want).max(), 1.0), op


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mcpu", default="znver3", help="an AVX2 CPU without VNNI (default znver3)")
    target = cpu(parser.parse_args().mcpu)
    if not target.runs_here:
        raise SystemExit(f"this host cannot run {target.mcpu} code")
    rng = np.random.default_rng(0)
    print("| kernel | int8 ms | float ms | float / int8 |")
    print("|---|---|---|---|")
    for m, k, n in DENSE:
        wq = rng.integers(-63, 64, (k, n)).astype(np.int8)
        args = [rng.integers(0, 256, (m, k)).astype(np.uint8), pack_int8_weight(wq, 16),
                np.full(n, 1e-3, np.float32), np.zeros(n, np.float32)]
        attrs = {"weight_bits": 7}
        q = kiln.build("dense_int8", [a.shape for a in args], ["uint8", "int8", "float32", "float32"], attrs=attrs,
                       target=target)
        _check("dense_int8", q, args, attrs)
        x, w, b = args[0].astype(np.float32), wq.astype(np.float32), np.zeros(n, np.float32)
        impl = choose(get_op("dense").check([x.shape, w.shape, b.shape]), target, constant_weight=True)
        packed = get_op(impl.weight_op).reference(w, **get_op(impl.weight_op).parse_attrs(impl.weight_attrs))
        f = kiln.build(impl.op, [x.shape, packed.shape, b.shape], attrs=impl.attrs, target=target)
        ti, tf = _best(q, args), _best(f, [x, packed, b])
        print(f"| dense {m} x {k} -> {n} | {ti * 1e3:.3f} | {tf * 1e3:.3f} | {tf / ti:.2f} |")
    for n, c, hw, kk, ks, p in CONV:
        x = rng.standard_normal((n, c, hw, hw)).astype(np.float32)
        wq = rng.integers(-63, 64, (kk, c, ks, ks)).astype(np.int8)
        args = [x, pack_conv_int8_weight(wq, 16), np.full(kk, 1e-3, np.float32), np.zeros(kk, np.float32)]
        attrs = {"in_scale": 0.03, "in_zero_point": 120, "padding": (p, p), "weight_bits": 7}
        q = kiln.build("conv2d_int8", [a.shape for a in args], ["float32", "int8", "float32", "float32"],
                       attrs=attrs, target=target)
        _check("conv2d_int8", q, args, attrs)
        f = kiln.build("conv2d", [x.shape, wq.shape], attrs={"padding": (p, p)}, target=target)
        ti, tf = _best(q, args), _best(f, [x, wq.astype(np.float32)])
        print(f"| conv2d {n}, {c}, {hw}x{hw} -> {kk}, {ks}x{ks} | {ti * 1e3:.3f} | {tf * 1e3:.3f} | {tf / ti:.2f} |")


if __name__ == "__main__":
    main()
