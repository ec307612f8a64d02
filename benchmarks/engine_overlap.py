"""Training-step time with kiln's dependency engine against strict serial
execution, in one run.

The same model, data and optimizer run in two fresh processes: one with the
engine's worker pool (kernels above a small size run on it, so Python keeps
building the step — the next layer, the backward graph, the per-parameter
updates, the DataLoader's next batch — while they run), one with
``KILN_ENGINE=serial`` (every push runs inline, in order). Each process
compiles or loads its kernels and warms up first; the figure is the median
step time over ``--steps`` steps.

Run: ``python benchmarks/engine_overlap.py [--steps 40] [--batch 256] [--hidden 1024] [--json]``.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time


def step_times(batch: int, hidden: int, steps: int) -> list[float]:
    import numpy as np

    from kiln import nn, optim
    from kiln.nn.data import DataLoader, NDArrayDataset

    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch * (steps + 5), 784)).astype("float32")
    y = rng.integers(0, 10, len(x)).astype("int32")
    nn.init.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                          nn.Linear(hidden, 10))
    opt = optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.SoftmaxLoss()
    times = []
    start = time.perf_counter()
    for i, (xb, yb) in enumerate(DataLoader(NDArrayDataset(x, y), batch_size=batch)):
        loss = loss_fn(model(nn.Tensor(xb)), nn.Tensor(yb))
        opt.reset_grad()
        loss.backward()
        opt.step()
        loss.numpy()  # the step is done when its loss is known
        now = time.perf_counter()
        if i >= 5:
            times.append(now - start)
        start = now
    return times


def run_mode(mode: str, args) -> dict:
    env = dict(os.environ)
    env.pop("KILN_ENGINE", None)
    if mode == "serial":
        env["KILN_ENGINE"] = "serial"
    out = subprocess.run([sys.executable, __file__, "--child", "--steps", str(args.steps), "--batch", str(args.batch),
                          "--hidden", str(args.hidden)], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        import numpy as np

        times = step_times(args.batch, args.hidden, args.steps)
        print(json.dumps({"median_ms": float(np.median(times)) * 1e3, "min_ms": min(times) * 1e3,
                          "max_ms": max(times) * 1e3}))
        return
    runs = {"serial": [], "engine": []}
    for mode in ("serial", "engine", "serial", "engine"):  # alternated: the machine's speed drifts
        runs[mode].append(run_mode(mode, args))
    serial, engine = (min(r["median_ms"] for r in runs[m]) for m in ("serial", "engine"))
    summary = {"model": f"MLP 784-{args.hidden}-{args.hidden}-10, batch {args.batch}, SGD momentum",
               **runs, "serial_ms": serial, "engine_ms": engine, "speedup": serial / engine}
    if args.json:
        print(json.dumps(summary))
        return
    print(f"# {summary['model']}; median step time over {args.steps} steps, two processes per mode, alternated")
    for mode in ("serial", "engine"):
        runs = ", ".join(f"{r['median_ms']:.1f} ms ({r['min_ms']:.1f}..{r['max_ms']:.1f})" for r in summary[mode])
        print(f"{mode:7s} {runs}")
    print(f"engine vs serial: {summary['speedup']:.2f}x (best median of each)")


if __name__ == "__main__":
    main()
