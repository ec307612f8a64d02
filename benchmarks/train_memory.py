"""Memory of a training step with autograd keeping only what each op's
gradient declares it reads (``Op.grad_inputs``/``grad_output``), against
keeping every input and output of every recorded op, in one run.

Two figures per mode, each from a fresh process:

* held for backward: the bytes of the arrays the graph keeps at the end of
  the forward pass (exact, counted by walking the graph);
* peak RSS over the steps, above the process's RSS after a warm-up step (the
  kernels are compiled by a first process and loaded from the disk cache).

Run: ``python benchmarks/train_memory.py [--batch 512] [--hidden 2048] [--steps 5] [--json]``.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys


def child(keep_all: bool, batch: int, hidden: int, steps: int) -> dict:
    import numpy as np

    from kiln import nn, optim
    from kiln.nn.tensor import keep_all_for_backward, saved_bytes

    keep_all_for_backward(keep_all)
    rng = np.random.default_rng(0)
    nn.init.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                          nn.Linear(hidden, hidden), nn.Tanh(), nn.Linear(hidden, 10))
    opt = optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.SoftmaxLoss()
    x = nn.Tensor(rng.standard_normal((batch, 784)).astype("float32"))
    y = nn.Tensor(rng.integers(0, 10, batch).astype("int32"))

    def step():
        loss = loss_fn(model(x), y)
        held = saved_bytes(loss)
        opt.reset_grad()
        loss.backward()
        opt.step()
        loss.numpy()
        return held

    step()  # warm-up: kernels, optimizer state
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    held = [step() for _ in range(steps)]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"held_mb": max(held) / 2 ** 20, "peak_rss_above_warmup_mb": (peak - base) / 1024}


def run(keep_all: bool, args) -> dict:
    cmd = [sys.executable, __file__, "--child", "--batch", str(args.batch), "--hidden", str(args.hidden),
           "--steps", str(args.steps)] + (["--keep-all"] if keep_all else [])
    out = subprocess.run(cmd, env=dict(os.environ), capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--keep-all", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.keep_all, args.batch, args.hidden, args.steps)))
        return
    run(False, args)  # compiles the kernels into the disk cache, so the measured processes only load them
    rows = {"keep everything": run(True, args), "keep what gradients declare": run(False, args)}
    if args.json:
        print(json.dumps(rows))
        return
    print(f"# MLP 784-{args.hidden}x3-10 (relu, relu, tanh), batch {args.batch}, SGD, {args.steps} steps")
    for name, r in rows.items():
        print(f"{name:28s} held for backward {r['held_mb']:7.1f} MB   peak RSS above warm-up "
              f"{r['peak_rss_above_warmup_mb']:7.1f} MB")
    a, b = rows["keep everything"]["held_mb"], rows["keep what gradients declare"]["held_mb"]
    print(f"held for backward: {b / a:.2f}x of keeping everything")


if __name__ == "__main__":
    main()
