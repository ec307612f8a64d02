"""Several configs of one kernel, timed interleaved in one process.

Each ``--config`` is a JSON object of knob values (``{}``: the template's
defaults); ``--torch`` adds PyTorch's kernel for a conv2d or one of its
gradients as a reference side; ``--cold N`` times each call on the next of N
copies of the inputs after the first (a weight each), so that they come from
memory as a model's layers' weights do, not from the cache the last call
left them in. Every side is warmed up, then sampled in turns
(``kiln.bench.timing.compare``), so a drift in the machine's speed hits all of
them: the way to compare configs on a noisy host.

Run: ``python benchmarks/compare_configs.py conv2d_backward_weight --shape
8x3x224x224,8x64x112x112 --attr kernel=7 --attr stride=2 --attr padding=3
--config '{"pixels": 0}' --config '{}' --torch``; a dense layer's weight
from memory: ``python benchmarks/compare_configs.py dense_packed --shape
128x768,96x768x32,3072 --config '{"block_m": 4}' --config '{}' --cold 12``
"""
from __future__ import annotations

import argparse
import json
import time

from kiln.bench.timing import calls_sampler, compare, kernel_sampler
from kiln.cli.args import input_shapes, parse_attrs
from kiln.errors import KilnError
from kiln.runtime import build
from kiln.runtime.measure import random_inputs, work


def torch_side(kernel, arrays):
    """PyTorch's kernel for the same conv2d workload on the same inputs."""
    import torch
    import tvm

    torch.set_num_threads(tvm.runtime.num_threads())
    a = kernel.workload.attrs
    conv = {k: a[k] for k in ("stride", "padding", "dilation")}
    conv["groups"] = a.get("groups", 1)
    t = [torch.from_numpy(x) for x in arrays]
    name, grad = kernel.workload.op.name, torch.nn.grad
    if name == "conv2d":
        return calls_sampler(lambda: torch.nn.functional.conv2d(*t, **conv))
    if name == "conv2d_backward_data":
        n, o = t[0].shape[:2]
        shape = (n, t[1].shape[1] * conv["groups"], *a["in_size"])
        return calls_sampler(lambda: grad.conv2d_input(shape, t[1], t[0], **conv))
    if name == "conv2d_backward_weight":
        shape = (t[1].shape[1], t[0].shape[1] // conv["groups"], *a["kernel"])
        return calls_sampler(lambda: grad.conv2d_weight(t[0], shape, t[1], **conv))
    raise SystemExit(f"--torch: no PyTorch reference for {name} (conv2d and its gradients have one)")


def cold_sampler(kernel, arrays, copies: int):
    """Seconds per call over ``copies`` calls, each on its own copy of the
    inputs after the first: together larger than the caches, so each call
    reads them from memory."""
    import tvm

    dev = kernel.target.device()
    first = tvm.runtime.tensor(arrays[0], dev)
    sets = [[first, *(tvm.runtime.tensor(a, dev) for a in random_inputs(kernel.shapes, kernel.dtypes, seed)[1:])]
            for seed in range(1, copies + 1)]

    def sample():
        start = time.perf_counter()
        for tensors in sets:
            kernel(*tensors)
        return (time.perf_counter() - start) / copies
    return sample


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("op")
    parser.add_argument("--shape", required=True)
    parser.add_argument("--attr", action="append", default=[])
    parser.add_argument("--config", action="append", default=[], help="knob values as JSON (repeatable)")
    parser.add_argument("--torch", action="store_true")
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--cold", type=int, default=0, metavar="N",
                        help="time each call on the next of N copies of the inputs after the first")
    args = parser.parse_args()
    if args.cold < 0 or (args.cold and args.torch):
        parser.error(f"got --cold {args.cold}, expected a positive count of copies (without --torch)")
    try:
        shapes, attrs = input_shapes(args.op, args.shape), parse_attrs(args.op, args.attr)
        configs = [json.loads(c) for c in args.config] or [{}]
        if not all(isinstance(c, dict) for c in configs):
            raise ValueError("a config is not a JSON object")
        kernels = [build(args.op, shapes, attrs=attrs, config=c) for c in configs]
    except KilnError as exc:  # a bad op, shape, attribute or knob: kiln's message, no traceback
        parser.error(str(exc))
    except ValueError as exc:  # json's errors among them
        parser.error(f"got --config {args.config}, expected JSON objects of knob values: {exc}")
    arrays = random_inputs(kernels[0].shapes, kernels[0].dtypes)
    samplers = {json.dumps(c): cold_sampler(k, arrays, args.cold) if args.cold else kernel_sampler(k, arrays)
                for c, k in zip(configs, kernels)}
    if args.torch:
        samplers["PyTorch"] = torch_side(kernels[0], arrays)
    unit, amount = work(kernels[0].workload)
    for name, side in compare(samplers, args.repeat).items():
        rate = f"{amount / side['median_s'] / 1e9:8.1f} {unit}" if amount else ""
        print(f"{name:50s} {side['median_s'] * 1e3:9.3f} ms {rate}  spread {100 * side['spread']:.0f}%")


if __name__ == "__main__":
    main()
