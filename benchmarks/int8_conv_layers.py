"""``conv2d_int8`` alone against the float ``conv2d`` of the same layer:
ResNet-50's convolution shapes (batch 1, and one at batch 8), each kernel
timed with ``Kernel.time`` (the default configs), interleaved per layer.

Run: ``python benchmarks/int8_conv_layers.py [--rounds 3]``. The int8
kernel's output is checked against its numpy reference first.
"""
from __future__ import annotations

import argparse

import numpy as np

import kiln
from kiln.te import get_op
from kiln.te.quantize_conv import pack_conv_int8_weight

#: (batch, in channels, map size, out channels, kernel, stride, padding)
LAYERS = [(1, 64, 56, 64, 3, 1, 1), (1, 64, 56, 256, 1, 1, 0), (1, 256, 56, 64, 1, 1, 0),
          (1, 128, 28, 128, 3, 1, 1), (1, 256, 14, 256, 3, 1, 1), (1, 1024, 14, 256, 1, 1, 0),
          (1, 512, 7, 512, 3, 1, 1), (8, 64, 56, 256, 1, 1, 0)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print("| layer (N, C, HxW -> K, kernel, stride) | int8 ms | GOPS | float ms | GFLOPS | float / int8 |")
    print("|---|---|---|---|---|---|")
    for n, c, hw, k, ks, s, p in LAYERS:
        x = rng.standard_normal((n, c, hw, hw)).astype(np.float32)
        wq = rng.integers(-127, 128, (k, c, ks, ks)).astype(np.int8)
        w = pack_conv_int8_weight(wq, 16)
        scale, offset = (rng.random(k) * 0.01).astype(np.float32), rng.standard_normal(k).astype(np.float32)
        attrs = {"in_scale": 0.03, "in_zero_point": 120, "stride": (s, s), "padding": (p, p)}
        q = kiln.build("conv2d_int8", [x.shape, w.shape, (k,), (k,)], ["float32", "int8", "float32", "float32"],
                       attrs=attrs)
        want = get_op("conv2d_int8").reference(x, w, scale, offset, relu=False, in_block=0, out_block=False,
                                                  weight_bits=8, **attrs)
        assert np.abs(np.asarray(q(x, w, scale, offset)) - want).max() <= 1e-3 * np.abs(want).max()
        f = kiln.build("conv2d", [x.shape, wq.shape], attrs={"stride": (s, s), "padding": (p, p)})
        wf = wq.astype(np.float32)
        times = {"int8": [], "float": []}
        for _ in range(args.rounds):
            times["int8"].append(q.time(x, w, scale, offset)["median"])
            times["float"].append(f.time(x, wf)["median"])
        ti, tf = (float(np.median(times[key])) for key in ("int8", "float"))
        ops = 2.0 * n * k * c * ks * ks * want.shape[2] * want.shape[3]
        print(f"| {n}, {c}, {hw}x{hw} -> {k}, {ks}x{ks}, {s} | {ti * 1e3:.3f} | {ops / ti / 1e9:.0f} | "
              f"{tf * 1e3:.3f} | {ops / tf / 1e9:.0f} | {tf / ti:.2f} |")


if __name__ == "__main__":
    main()
