"""The Winograd convolution against the direct one on the same 3x3 layer,
timed interleaved in one process, as an exported model runs them: the weight
prepared once (``winograd_conv2d_weight`` / ``pack_conv2d_weight``), the
input and output in channel blocks when ``--in-block`` is given.

Run: ``python benchmarks/winograd_vs_direct.py --shape 64x16x8x8 --out 32``
(the digits CNN's second layer at 64 images). Prints each side's time and
its rate in the direct convolution's GFLOPS, and whether the export would
take Winograd for this layer, and with which output tile
(``graph.prepack.winograd_tile``).
"""
from __future__ import annotations

import argparse

import numpy as np

import kiln
from kiln.bench.timing import compare, kernel_sampler
from kiln.graph.prepack import winograd_tile
from kiln.schedules.cpu.conv2d_defaults import packed_channels
from kiln.te import get_op
from kiln.te.layout import blocked_array
from kiln.te.winograd import TRANSFORMS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", required=True, help="NxCxHxW")
    parser.add_argument("--out", type=int, required=True, help="output channels")
    parser.add_argument("--padding", type=int, default=1)
    parser.add_argument("--in-block", type=int, default=16, help="input channel block (0: NCHW input)")
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    n, c, h, w = (int(d) for d in args.shape.split("x"))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, c, h, w)).astype("float32")
    weight = rng.standard_normal((args.out, c, 3, 3)).astype("float32")
    workload = get_op("conv2d").check([x.shape, weight.shape], ["float32"] * 2, {"padding": args.padding})
    oc = packed_channels(workload, kiln.cpu())
    xi = blocked_array(x, args.in_block) if args.in_block else x
    packed = kiln.build("pack_conv2d_weight", [weight.shape], attrs={"oc": oc})(weight)
    attrs = {"out_channels": args.out, "padding": args.padding, "in_block": args.in_block, "out_block": True}
    sides = {"conv2d_packed": kernel_sampler(kiln.build("conv2d_packed", [xi.shape, packed.shape], attrs=attrs),
                                             [xi, packed])}
    for tile in TRANSFORMS:  # each output tile F(m x m, 3x3)
        u = kiln.build("winograd_conv2d_weight", [weight.shape], attrs={"oc": oc, "tile": tile})(weight)
        sides[f"winograd F({tile},3)"] = kernel_sampler(
            kiln.build("conv2d_winograd", [xi.shape, u.shape], attrs=attrs), [xi, u])
    flops = workload.op.flops(workload.shapes, **workload.attrs)
    print(f"# {kiln.cpu()}  {args.shape} -> {args.out} channels, block {oc}; "
          f"the export takes: {f'winograd F({tile},3)' if (tile := winograd_tile(workload)) else 'direct'}")
    for name, side in compare(sides, args.repeat).items():
        print(f"{name:16s} {side['median_s'] * 1e6:9.1f} us {flops / side['median_s'] / 1e9:7.1f} GFLOPS"
              f"  spread {100 * side['spread']:.0f}%")


if __name__ == "__main__":
    main()
