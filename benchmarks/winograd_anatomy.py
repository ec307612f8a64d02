"""Where a Winograd convolution's time goes, against what the machine allows.

Times, interleaved in one process, in the steady state of calls that follow
one another (no pause for idle between samples, as a model's calls run):

- ``kernel``: ``conv2d_winograd`` with its template's defaults, as an
  exported model runs the layer (its weight transformed once, its input and
  output in channel blocks);
- ``kernel, one thread``: the same config with ``parallel`` 0;
- ``products, one thread``: its matrix products alone, with the template's
  register tile (``tile_p`` tiles x the block's channels in accumulators, the
  input channels outside them), on inputs already transformed;
- ``products, weights in L1``: the same products with the images looped
  inside each position, so a position's weights come from L1 for every image
  after the first, where the template streams all of an image's positions'
  weights from L2 (36 x 2 KB for F(4x4) on 16 -> 32 channels, more than a
  32-48 KB L1 holds): what that streaming costs the products;
- ``empty parallel launch``: a kernel of one vector per thread, run on TVM's
  thread pool: what any parallel kernel pays to start its tasks and wait for
  them.

and prints what they imply: the products' rate against one core's FMA peak
(``kiln.bench.machine.fma_peak``), the rest of the one-thread kernel (the
transforms, with what running them beside the products costs), and what
running on the pool costs beyond dividing the one-thread time by the
threads.

Run: ``python benchmarks/winograd_anatomy.py --shape 16x16x8x8 --out 32``
(the digits CNN's second layer at batch 16).
"""
from __future__ import annotations

import argparse

import numpy as np
import tvm
from tvm import te

import kiln
from kiln.bench.machine import fma_peak
from kiln.bench.timing import compare, kernel_sampler, module_sampler
from kiln.strategy.conv2d import winograd_tile
from kiln.runtime.measure import random_inputs
from kiln.schedules.cpu.conv2d_defaults import packed_channels
from kiln.te import get_op


def products_module(n: int, blocks: int, span: int, tiles: int, channels: int, oc: int, tile_p: int, target,
                    images_inner: bool = False):
    """The Winograd products of ``n`` images as the template computes them:
    per image, channel block and position, ``tile_p`` tiles x ``oc`` channels
    accumulated in registers over the input channels, written once. With
    ``images_inner`` the images loop inside each position, so a position's
    weights are read from L1 for every image after the first instead of
    streamed from L2 for each (a task's span^2 positions of weights outgrow L1)."""
    v = te.placeholder((n, span, span, tiles, channels), name="v")
    u = te.placeholder((blocks, span, span, channels, oc), name="u")
    rc = te.reduce_axis((0, channels), "rc")
    m = te.compute((n, blocks, span, span, tiles, oc), lambda b, kb, e, w, p, k: te.sum(
        v[b, e, w, p, rc] * u[kb, e, w, rc, k], axis=rc), name="m")
    sch = tvm.s_tir.Schedule(te.create_prim_func([v, u, m]))
    block = sch.get_sblock("m")
    b, kb, e, w, p, k, r = sch.get_loops(block)
    po, pi = sch.split(p, [None, tile_p])
    sch.reorder(*((kb, e, w, b) if images_inner else (b, kb, e, w)), po, r, pi, k)
    acc = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(acc, po)
    sch.vectorize(k)
    sch.unroll(pi)
    sch.decompose_reduction(block, r)
    *_, row, lane = sch.get_loops(acc)
    sch.unroll(row)
    sch.vectorize(lane)
    return tvm.compile(sch.mod, target=target.tvm)


def launch_module(target) -> tuple:
    """One vector of work per thread, the threads' loop parallel: the
    compiled module and its two tensors."""
    threads, lanes = tvm.runtime.num_threads(), target.lanes("float32")
    a = te.placeholder((threads, lanes), name="a")
    out = te.compute((threads, lanes), lambda t, j: a[t, j] + 1.0, name="out")
    sch = tvm.s_tir.Schedule(te.create_prim_func([a, out]))
    t, j = sch.get_loops(sch.get_sblock("out"))
    sch.parallel(t)
    sch.vectorize(j)
    return tvm.compile(sch.mod, target=target.tvm), [tvm.runtime.tensor(np.zeros((threads, lanes), "float32"))
                                                     for _ in range(2)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", default="16x16x8x8", help="NxCxHxW")
    parser.add_argument("--out", type=int, default=32, help="output channels")
    parser.add_argument("--padding", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--sample-ms", type=int, default=200,
                        help="a sample's length: long, as a core left idle by a one-thread side runs slow for a while")
    args = parser.parse_args()
    try:
        n, c, h, w = (int(d) for d in args.shape.split("x"))
        if min(n, c, h, w, args.out, args.repeat, args.sample_ms) < 1:
            raise ValueError
    except ValueError:
        parser.error(f"got --shape {args.shape!r}, --out {args.out}, --repeat {args.repeat}, --sample-ms "
                     f"{args.sample_ms}, expected positive whole numbers (--shape NxCxHxW)")
    target = kiln.cpu()
    lanes = target.lanes("float32")
    try:
        workload = get_op("conv2d").check([(n, c, h, w), (args.out, c, 3, 3)], ["float32"] * 2,
                                          {"padding": args.padding})
    except kiln.KilnError as exc:
        parser.error(str(exc))
    step = winograd_tile(workload)
    if not step or c % lanes:
        parser.error(f"got a layer the export keeps direct or reads unblocked ({c} input channels, {lanes} "
                     f"lanes): expected one it runs as Winograd on blocked input")
    oc = packed_channels(workload, target)
    blocks, span = -(-args.out // oc), step + 2
    oh, ow = workload.out_shapes[0][2:]
    tiles = -(-oh // step) * -(-ow // step)
    shapes = [(n, c // lanes, h, w, lanes), (blocks, span, span, c, oc)]
    attrs = {"out_channels": args.out, "padding": args.padding, "in_block": lanes, "out_block": True}
    kernel = kiln.build("conv2d_winograd", shapes, attrs=attrs)
    config = kernel.resolved_config()
    serial = kiln.build("conv2d_winograd", shapes, attrs=attrs, config={**config, "parallel": 0})
    arrays = random_inputs(kernel.shapes, kernel.dtypes)
    products = [products_module(n, blocks, span, tiles, c, oc, config["tile_p"], target, inner)
                for inner in (False, True)]
    rng = np.random.default_rng(0)
    product_args = [tvm.runtime.tensor(rng.standard_normal(s).astype("float32")) for s in
                    ((n, span, span, tiles, c), (blocks, span, span, c, oc), (n, blocks, span, span, tiles, oc))]
    launch, launch_args = launch_module(target)
    last = args.sample_ms / 1e3
    sides = {"kernel": kernel_sampler(kernel, arrays, last), "kernel, one thread": kernel_sampler(serial, arrays, last),
             "products, one thread": module_sampler(products[0].mod, product_args, last),
             "products, weights in L1": module_sampler(products[1].mod, product_args, last),
             "empty parallel launch": module_sampler(launch.mod, launch_args, last)}
    print(f"conv2d_winograd F({step}x{step}) {args.shape} -> {args.out} channels, config {config}, "
          f"{tvm.runtime.num_threads()} threads")
    peaks = [fma_peak(target) / target.cores]
    times = {name: side["median_s"] for name, side in compare(sides, args.repeat, settle=0).items()}
    peaks.append(fma_peak(target) / target.cores)
    for name, seconds in times.items():
        print(f"  {name:24s} {seconds * 1e6:9.2f} us")
    print(f"  one core's FMA peak before and after: {peaks[0]:.1f}, {peaks[1]:.1f} GFLOPS")
    report(times, 2 * n * blocks * span * span * tiles * c * oc, sum(peaks) / 2)


def report(times: dict, product_flops: int, core_peak: float) -> None:
    """What the times imply (see the module docstring)."""
    threads = tvm.runtime.num_threads()
    rate = product_flops / times["products, one thread"] / 1e9
    in_l1 = product_flops / times["products, weights in L1"] / 1e9
    rest = times["kernel, one thread"] - times["products, one thread"]
    pool = times["kernel"] - times["kernel, one thread"] / threads
    print(f"  products: {rate:.1f} GFLOPS, {100 * rate / core_peak:.0f}% of one core's FMA peak (their mean); "
          f"with the weights in L1 {100 * in_l1 / core_peak:.0f}%")
    print(f"  one thread: products {100 * times['products, one thread'] / times['kernel, one thread']:.0f}%, "
          f"the rest (the transforms) {rest * 1e6:.2f} us")
    print(f"  on {threads} threads: {pool * 1e6:.2f} us beyond the one-thread time / {threads} "
          f"({100 * pool / times['kernel']:.0f}% of the kernel); an empty launch takes "
          f"{times['empty parallel launch'] * 1e6:.2f} us")


if __name__ == "__main__":
    main()
