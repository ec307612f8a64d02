"""Training steps with direct and with Winograd convolutions, against PyTorch, in one run.

For each conv case of the train suite (``kiln.bench.suites.train.CASES``):
kiln's eager step and its compiled step (``kiln.compile``), each with
``KILN_WINOGRAD=0`` (direct convolutions) and with it on (the default), and
PyTorch's eager step, timed interleaved on the same batch. Each kiln model
takes its kernels (and its compiled step) under its own setting before the
timing starts. Prints each side's median and its time over PyTorch's (below
1 kiln is faster).

Run: ``python benchmarks/winograd_steps.py [--repeat 10] [--cases cnn,zoo]``
(a case is chosen by a word of its name).
"""
from __future__ import annotations

import argparse
import os

import numpy as np

from kiln import nn
from kiln.bench.suites.train import CASES, compiled_step, kiln_step, torch_step
from kiln.bench.timing import calls_sampler, compare
from kiln.bench.twins import torch_twin

WARM = 4  # steps run under each setting before timing: kernels chosen and compiled


def _under(setting: str, make_step):
    """A step made and warmed with ``KILN_WINOGRAD=setting``; the variable restored after."""
    before = os.environ.get("KILN_WINOGRAD")
    os.environ["KILN_WINOGRAD"] = setting
    try:
        step = make_step()
        for _ in range(WARM):
            step()
    finally:
        if before is None:
            os.environ.pop("KILN_WINOGRAD")
        else:
            os.environ["KILN_WINOGRAD"] = before
    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--cases", default="", help="comma-separated words: only the cases naming one")
    args = parser.parse_args()
    import torch

    words = [w for w in args.cases.split(",") if w]
    rng = np.random.default_rng(0)
    for name, (make, shape, momentum) in CASES.items():
        if "conv" not in name.lower() and "cnn" not in name and "resnet" not in name:
            continue  # no convolution: nothing changes
        if words and not any(w in name for w in words):
            continue
        x = rng.random(shape, dtype=np.float32)
        y = rng.integers(0, 10, shape[0]).astype("int32")
        nn.init.manual_seed(0)
        samplers = {"torch": calls_sampler(torch_step(torch, torch_twin(make()).train(), x, y, momentum))}
        for label, setting in (("direct", "0"), ("winograd", "1")):
            for kind, factory in (("eager", kiln_step), ("compiled", compiled_step)):
                nn.init.manual_seed(0)
                model = make().train()
                samplers[f"{kind} {label}"] = calls_sampler(
                    _under(setting, lambda m=model, f=factory: f(m, x, y, momentum)))
        sides = compare(samplers, args.repeat)
        ref = sides["torch"]["median_s"]
        print(f"{name}: PyTorch {ref * 1e3:.3f} ms", flush=True)
        for key, side in sides.items():
            if key != "torch":
                print(f"  {key:18s} {side['median_s'] * 1e3:8.3f} ms  {side['median_s'] / ref:5.2f}x PyTorch  "
                      f"spread {100 * side['spread']:.0f}%", flush=True)


if __name__ == "__main__":
    main()
