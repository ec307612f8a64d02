"""Grouped and depthwise convolutions against PyTorch, timed interleaved in
one process (``kiln.bench.timing.compare``): kiln's kernel with its
template's defaults (``schedules/cpu/conv2d_grouped.py``) beside
``torch.nn.functional.conv2d`` on the same inputs, both on the same number
of threads (kiln's thread pool: the cores).

The layers: MobileNetV2's depthwise 3x3 on 144 x 56 x 56 and 384 x 14 x 14
(stride 1), its stride-2 one on 144 x 56 x 56, and a ResNeXt-style 3x3 of
32 groups on 128 x 28 x 28, at batch 1. ``--backward`` adds each layer's data
and weight gradients (``torch.nn.grad``). ``--threads 1`` times both sides on
one thread (kiln's kernels with ``parallel`` 0).

Run: ``python benchmarks/grouped_conv.py [--backward] [--threads 1] [--repeat 15]``
"""
from __future__ import annotations

import argparse

import numpy as np

from kiln.bench.timing import calls_sampler, compare, kernel_sampler
from kiln.runtime import build
from kiln.runtime.measure import work

#: (name, x shape, weight shape, attrs)
LAYERS = [
    ("depthwise 144x56x56", (1, 144, 56, 56), (144, 1, 3, 3), {"padding": 1, "groups": 144}),
    ("depthwise 384x14x14", (1, 384, 14, 14), (384, 1, 3, 3), {"padding": 1, "groups": 384}),
    ("depthwise 144x56x56 /2", (1, 144, 56, 56), (144, 1, 3, 3), {"padding": 1, "groups": 144, "stride": 2}),
    ("grouped 128x28x28 g32", (1, 128, 28, 28), (128, 4, 3, 3), {"padding": 1, "groups": 32}),
]


def sides(x_shape, w_shape, attrs, which: str, config: dict):
    """(kiln kernel, its inputs, PyTorch's call) for the forward conv or one of its gradients."""
    import torch

    rng = np.random.default_rng(0)
    x, w = (rng.standard_normal(s).astype("float32") for s in (x_shape, w_shape))
    torch_attrs = {"stride": attrs.get("stride", 1), "padding": attrs["padding"], "groups": attrs["groups"]}
    tx, tw = torch.from_numpy(x), torch.from_numpy(w)
    y_shape = tuple(torch.nn.functional.conv2d(tx, tw, **torch_attrs).shape)
    gy = rng.standard_normal(y_shape).astype("float32")
    tgy = torch.from_numpy(gy)
    if which == "forward":
        return (build("conv2d", [x_shape, w_shape], attrs=attrs, config=config), [x, w],
                lambda: torch.nn.functional.conv2d(tx, tw, **torch_attrs))
    if which == "data":
        return (build("conv2d_backward_data", [y_shape, w_shape], attrs={**attrs, "in_size": x_shape[2:]},
                      config=config), [gy, w],
                lambda: torch.nn.grad.conv2d_input(x_shape, tw, tgy, **torch_attrs))
    return (build("conv2d_backward_weight", [x_shape, y_shape], attrs={**attrs, "kernel": w_shape[2:]},
                  config=config), [x, gy],
            lambda: torch.nn.grad.conv2d_weight(tx, w_shape, tgy, **torch_attrs))


def main() -> None:
    import torch
    import tvm

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backward", action="store_true", help="also the data and weight gradients")
    parser.add_argument("--threads", type=int, default=0, help="1: both sides on one thread (default: the pool's)")
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    threads = args.threads or tvm.runtime.num_threads()
    torch.set_num_threads(threads)
    config = {"parallel": 0} if threads == 1 else {}
    print(f"threads: {threads} (kiln and PyTorch {torch.__version__})")
    for which in ("forward", "data", "weight") if args.backward else ("forward",):
        for name, x_shape, w_shape, attrs in LAYERS:
            kernel, arrays, reference = sides(x_shape, w_shape, attrs, which, config)
            timed = compare({"kiln": kernel_sampler(kernel, arrays), "PyTorch": calls_sampler(reference)},
                            args.repeat)
            unit, amount = work(kernel.workload)
            ours, theirs = timed["kiln"], timed["PyTorch"]
            noisy = " (noisy)" if max(ours["spread"], theirs["spread"]) > 0.1 else ""
            print(f"{which:8s} {name:24s} kiln {ours['median_s'] * 1e3:7.3f} ms "
                  f"({amount / ours['median_s'] / 1e9:5.1f} {unit})  PyTorch {theirs['median_s'] * 1e3:7.3f} ms  "
                  f"PyTorch/kiln {theirs['median_s'] / ours['median_s']:5.2f}x  spread "
                  f"{100 * ours['spread']:.0f}% / {100 * theirs['spread']:.0f}%{noisy}")


if __name__ == "__main__":
    main()
