"""The Winograd convolution against the direct one on the same 3x3 layer,
timed interleaved in one process, as an exported model runs them: the weight
prepared once (``winograd_conv2d_weight`` / ``pack_conv2d_weight``), the
input and output in channel blocks when ``--in-block`` is given.

Run: ``python benchmarks/winograd_vs_direct.py --shape 64x16x8x8 --out 32``
(the digits CNN's second layer at 64 images). Prints each side's time and
its rate in the direct convolution's GFLOPS, and whether the export would
take Winograd for this layer, and with which output tile
(``kiln.strategy.conv2d.winograd_tile``).

With ``--training``, the layer as training runs it, its weight changing every
call (``kiln.strategy``: the Winograd strategy for weights that change): the direct ``conv2d`` (packing its weight in each
call) and its stride-1 data gradient ``conv2d_backward_data`` against each
stage of their Winograd form (the input's blocking, the weight transform,
the Winograd convolution), each stage timed on its own, interleaved.
"""
from __future__ import annotations

import argparse

import numpy as np

import kiln
from kiln.bench.timing import compare, kernel_sampler
from kiln.errors import KilnError
from kiln.runtime.staged import StagedKernel
from kiln.strategy import Direct, choose
from kiln.strategy.conv2d import winograd_tile
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
    parser.add_argument("--training", action="store_true", help="the weight transformed in every call")
    args = parser.parse_args()
    try:
        n, c, h, w = (int(d) for d in args.shape.split("x"))
        if min(n, c, h, w, args.out, args.repeat) < 1:
            raise ValueError
    except ValueError:
        parser.error(f"got --shape {args.shape!r}, --out {args.out}, --repeat {args.repeat}, expected positive "
                     "whole numbers (--shape NxCxHxW)")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, c, h, w)).astype("float32")
    weight = rng.standard_normal((args.out, c, 3, 3)).astype("float32")
    try:
        workload = get_op("conv2d").check([x.shape, weight.shape], ["float32"] * 2, {"padding": args.padding})
    except KilnError as exc:  # a padding the conv cannot take: kiln's message, no traceback
        parser.error(str(exc))
    if args.training:
        return training(x, weight, workload, args.repeat)
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


def training(x, weight, workload, repeat: int) -> None:
    """The direct kernels against the stages of the Winograd form eager ops and compiled steps run."""
    gy = np.random.default_rng(1).standard_normal(workload.out_shapes[0]).astype("float32")
    gradient = get_op("conv2d_backward_data").check([gy.shape, weight.shape], ["float32"] * 2, {
        "in_size": x.shape[2:], "padding": workload.attrs["padding"]})
    sides, flops = {}, workload.op.flops(workload.shapes, **workload.attrs)
    for name, w, inputs in (("conv2d", workload, [x, weight]), ("data gradient", gradient, [gy, weight])):
        direct = kiln.build(w.op.name, w.shapes, attrs=w.attrs)
        sides[f"{name} direct"] = kernel_sampler(direct, inputs)
        implementation = choose(w, kiln.cpu())
        if isinstance(implementation, Direct):
            print(f"# {name}: kept direct (kiln.strategy.choose)")
            continue
        composite = StagedKernel(w, kiln.cpu(), implementation)
        data, weight = inputs
        if composite.blocked is not None:
            sides[f"{name} to_blocked"] = kernel_sampler(composite.blocked, [data])
            data = composite.blocked(data)
        sides[f"{name} winograd_conv2d_weight"] = kernel_sampler(composite.weight, [weight])
        sides[f"{name} conv2d_winograd"] = kernel_sampler(composite.main, [data, composite.weight(weight)])
    print(f"# {kiln.cpu()}  {'x'.join(map(str, x.shape))} -> {weight.shape[0]} channels, as training runs it "
          "(GFLOPS: the layer's direct-convolution work over the row's time)")
    for name, side in compare(sides, repeat).items():
        rate = f"{flops / side['median_s'] / 1e9:7.1f} GFLOPS" if name.endswith(("direct", "winograd")) else ""
        print(f"{name:40s} {side['median_s'] * 1e6:9.1f} us {rate:14s}  spread {100 * side['spread']:.0f}%")


if __name__ == "__main__":
    main()
