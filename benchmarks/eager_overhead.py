"""Microseconds per eager op: the time from a ``Tensor`` operation to its
kernel having run, on tensors so small that the kernel itself takes well
under a microsecond (its own time, called directly, is printed beside).

Rows, each the median of ``--trials`` trials of ``--ops`` back-to-back ops,
ending with a wait for the last result, in wall time and in the calling
thread's CPU time (on a shared machine the steadier of the two):

* ``add``: two 16-element tensors, nothing recorded;
* ``multiply (recorded)``: one input requires grad, so autograd records a node;
* ``step``: a training step of a 16-8-4 MLP (forward, loss, backward, SGD
  momentum), divided by its kernel launches.

Run: ``python benchmarks/eager_overhead.py [--ops 3000] [--trials 7] [--json]``;
``KILN_ENGINE=serial`` to compare with strict serial execution.
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np


def _median_us(fn, ops: int, trials: int) -> tuple[float, float]:
    """Wall and CPU microseconds per op, medians over the trials. The CPU
    time is the calling thread's, where an eager op's whole path runs (the
    engine runs a kernel inline, and every kernel here is serial): a shared
    machine's stolen cycles and other threads' spinning do not count in it."""
    fn(ops // 10)  # warm: kernels compiled or loaded, caches filled
    wall, cpu = [], []
    for _ in range(trials):
        start, start_cpu = time.perf_counter(), time.thread_time()
        fn(ops)
        cpu.append((time.thread_time() - start_cpu) / ops * 1e6)
        wall.append((time.perf_counter() - start) / ops * 1e6)
    return float(np.median(wall)), float(np.median(cpu))


def measure(ops: int, trials: int) -> dict:
    import tvm

    import kiln
    from kiln import nn
    from kiln.runtime import engine

    a = kiln.Tensor(np.ones(16, "float32"))
    b = kiln.Tensor(np.ones(16, "float32"))
    w = kiln.Tensor(np.ones(16, "float32"), requires_grad=True)

    def adds(n):
        for _ in range(n):
            c = a + b
        c.wait()

    def multiplies(n):
        for _ in range(n):
            c = w * b
        c.wait()

    kernel = kiln.build("add", [(16,), (16,)]).module["main"]  # the compiled function itself
    x, y, out = (tvm.runtime.tensor(np.ones(16, "float32")) for _ in range(3))

    def kernel_calls(n):
        for _ in range(n):
            kernel(x, y, out)

    nn.init.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 4))
    opt, loss_fn = kiln.optim.SGD(model.parameters(), lr=0.01, momentum=0.9), nn.SoftmaxLoss()
    xb, yb = kiln.Tensor(np.ones((4, 16), "float32")), kiln.Tensor(np.arange(4, dtype="int32"))
    launches = []
    originals = {name: getattr(engine.Engine, name) for name in ("push", "push_new")}  # every op takes one

    def counting(name):
        def push(self, fn, *args, **kwargs):
            launches.append(1)
            return originals[name](self, fn, *args, **kwargs)
        return push

    def steps(n):
        for _ in range(n):
            opt.zero_grad()
            loss = loss_fn(model(xb), yb)
            loss.backward()
            opt.step()
        loss.wait()

    steps(3)
    for name in originals:
        setattr(engine.Engine, name, counting(name))
    try:
        steps(1)
    finally:
        for name, method in originals.items():
            setattr(engine.Engine, name, method)
    per_step = len(launches)
    step_us = _median_us(steps, max(1, ops // per_step), trials)
    rows = {"add_us": _median_us(adds, ops, trials), "multiply_recorded_us": _median_us(multiplies, ops, trials),
            "kernel_call_us": _median_us(kernel_calls, ops, trials),
            "step_us_per_launch": tuple(t / per_step for t in step_us)}
    result = {key: wall for key, (wall, _) in rows.items()}
    result.update({key.replace("_us", "_cpu_us"): cpu for key, (_, cpu) in rows.items()})
    return {**result, "step_launches": per_step, "engine_workers": engine.default().workers}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=3000)
    parser.add_argument("--trials", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = measure(args.ops, args.trials)
    if args.json:
        print(json.dumps(result))
        return
    print(f"# eager op overhead, engine workers {result['engine_workers']} (0: serial); median of {args.trials} "
          f"trials of {args.ops} ops; wall and CPU microseconds")
    rows = [("add (16 floats, not recorded)", "add_us", "per op"),
            ("multiply (recorded for autograd)", "multiply_recorded_us", "per op"),
            ("MLP 16-8-4 SGD step", "step_us_per_launch", f"per launch ({result['step_launches']} launches)"),
            ("the add kernel called directly", "kernel_call_us", "per call")]
    for label, key, unit in rows:
        print(f"{label:34s}{result[key]:8.2f} wall {result[key.replace('_us', '_cpu_us')]:8.2f} cpu  us {unit}")


if __name__ == "__main__":
    main()
