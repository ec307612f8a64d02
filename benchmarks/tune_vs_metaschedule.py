"""kiln's tuner against TVM MetaSchedule, at the same trial budget, in one run.

For each task both tuners get the same budget (``--trials``), the same target
(the detected CPU, TVM's pool at kiln's thread count) and the same
measurement settings (1 call per repeat, 5 repeats, >= 40 ms per repeat).
MetaSchedule runs ``tune_tir`` with its XGBoost cost model. The best kernel of
each is then exported and re-measured in a fresh process, next to the
reference (numpy for matmul, PyTorch CPU for conv2d when installed), and the
machine's FMA peak. Then kiln's xgb tuner is compared with its random tuner
at ``--race-trials`` over three seeds.

Run: ``python benchmarks/tune_vs_metaschedule.py [--trials 64] [--tasks all|matmul|conv2d] [--json FILE]``.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import tvm

import kiln
from kiln.autotune import Task, tune
from kiln.bench.machine import fma_peak
from kiln.bench.reference import NumpyReference
from kiln.bench.timing import calls_sampler, warm_up
from kiln.schedules import config_key
from kiln.runtime.lower import declare

TASKS = {
    "matmul1024": ("matmul", [(1024, 1024), (1024, 1024)], {}),
    "matmul2048": ("matmul", [(2048, 2048), (2048, 2048)], {}),
    "conv64": ("conv2d", [(1, 64, 56, 56), (64, 64, 3, 3)], {"padding": 1}),
    "conv256": ("conv2d", [(1, 256, 14, 14), (256, 256, 3, 3)], {"padding": 1}),
}
TIMING = {"number": 1, "repeat": 5, "min_repeat_ms": 40}


def ms_target(task: Task) -> tvm.target.Target:
    return tvm.target.Target({"kind": "llvm", "mcpu": task.target.mcpu, "num-cores": kiln.config.num_threads()})


def tune_kiln(task: Task, trials: int, folder: str, tuner="xgb", seed=0) -> dict:
    start = time.perf_counter()
    result = tune(task, trials=trials, tuner=tuner, records=os.path.join(folder, f"{tuner}-{seed}.jsonl"),
                  seed=seed, transfer=False)
    wall = time.perf_counter() - start
    best = result.best
    lib = os.path.join(folder, f"kiln-{task.key}.so")
    tvm.compile(task.lower(best["config"]).sch.mod, target=task.target.tvm).export_library(lib)
    return {"wall_s": wall, "gflops_tuning": best["result"]["gflops"], "config": best["config"], "library": lib,
            "errors": len(result.errors)}


def tune_metaschedule(task: Task, trials: int, folder: str) -> dict:
    from tvm.s_tir import meta_schedule as ms

    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
    inputs, outs = declare(task.op, task.shapes, task.dtypes, task.attrs, task.out_shapes, task.out_dtypes)
    mod = tvm.IRModule({"main": tvm.te.create_prim_func(inputs + outs)})
    target = ms_target(task)
    work = os.path.join(folder, "ms-" + task.key)
    runner = ms.runner.LocalRunner(evaluator_config=ms.runner.EvaluatorConfig(**TIMING))
    # its 30 s default build timeout kills every build on a 2-core machine, where a builder
    # worker alone spends seconds importing TVM; kiln's builder allows 60 s per build
    builder = ms.builder.LocalBuilder(timeout_sec=120)
    start = time.perf_counter()
    db = ms.tune_tir(mod, target, work, max_trials_global=trials, num_trials_per_iter=16, cost_model="xgb",
                     runner=runner, builder=builder, seed=0)
    wall = time.perf_counter() - start
    sch = ms.tir_integration.compile_tir(db, mod, target)
    if sch is None:
        raise RuntimeError(f"MetaSchedule found no valid schedule for {task.name} in {trials} trials (see {work}/logs)")
    lib = os.path.join(folder, f"ms-{task.key}.so")
    tvm.compile(sch.mod, target=target).export_library(lib)
    return {"wall_s": wall, "library": lib}


def remeasure(lib: str, data: str) -> dict:
    """Time a library in a fresh process (``--measure`` mode of this script)."""
    out = subprocess.run([sys.executable, __file__, "--measure", lib, data], capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure_main(lib: str, data: str) -> None:
    with np.load(data) as d:
        arrays = [d[f"in{i}"] for i in range(int(d["n_in"]))] + [np.zeros_like(d["out0"])]
        expected = d["out0"]
    dev = tvm.cpu(0)
    mod = tvm.runtime.load_module(lib)
    args = [tvm.runtime.tensor(a, dev) for a in arrays]
    mod["main"](*args)
    ok = bool(np.allclose(args[-1].numpy(), expected, rtol=1e-3, atol=1e-3))
    res = mod.time_evaluator("main", dev, number=1, repeat=10, min_repeat_ms=100)(*args)
    costs = [float(c) for c in res.results]
    print(json.dumps({"median_s": float(np.median(costs)), "min_s": min(costs), "max_s": max(costs), "correct": ok}))


def reference_time(task: Task, inputs) -> tuple[str, float | None]:
    """The reference's median seconds per call, warmed up until stable: numpy at
    full speed (its own process, without the OpenBLAS pins) for matmul,
    PyTorch for conv2d."""
    if task.op.name == "matmul":
        with NumpyReference() as ref:
            ref.prepare(task.workload)
            sampler, name = ref.sample, f"numpy ({ref.info['blas'][0]['architecture']} kernel)"
            warm_up(sampler)
            return name, float(np.median([sampler() for _ in range(10)]))
    try:
        import torch
    except ImportError:
        return "PyTorch (not installed)", None
    torch.set_num_threads(kiln.config.num_threads())
    x, w = (torch.from_numpy(a) for a in inputs)
    pad = task.attrs["padding"]
    with torch.no_grad():
        sampler = calls_sampler(lambda: torch.nn.functional.conv2d(x, w, padding=pad))
        warm_up(sampler)
        return "PyTorch", float(np.median([sampler() for _ in range(10)]))


def compare(name: str, trials: int, folder: str) -> dict:
    op, shapes, attrs = TASKS[name]
    task = Task.create(op, shapes, attrs=attrs)
    inputs, outputs = task.data()
    data = os.path.join(folder, f"{name}.npz")
    np.savez(data, n_in=len(inputs), n_out=1, out0=outputs[0], **{f"in{i}": a for i, a in enumerate(inputs)})
    ours = tune_kiln(task, trials, folder)
    theirs = tune_metaschedule(task, trials, folder)
    gf = lambda m: task.flops / m["median_s"] / 1e9  # noqa: E731
    ours.update(remeasure(ours["library"], data))
    theirs.update(remeasure(theirs["library"], data))
    ref_name, ref_s = reference_time(task, inputs)
    peak = fma_peak()  # measured next to the reference: this shared machine's speed drifts
    row = {"peak_gflops": peak, "task": name, "trials": trials, "kiln_gflops": gf(ours), "ms_gflops": gf(theirs),
           "kiln_spread": [task.flops / ours[k] / 1e9 for k in ("max_s", "min_s")],
           "ms_spread": [task.flops / theirs[k] / 1e9 for k in ("max_s", "min_s")],
           "kiln_wall_s": ours["wall_s"], "ms_wall_s": theirs["wall_s"], "kiln_config": ours["config"],
           "kiln_correct": ours["correct"], "ms_correct": theirs["correct"], "reference": ref_name,
           "ref_gflops": task.flops / ref_s / 1e9 if ref_s else None}
    row["vs_ms"] = row["kiln_gflops"] / row["ms_gflops"]
    row["wall_ratio"] = row["kiln_wall_s"] / row["ms_wall_s"]
    row["vs_ref"] = row["kiln_gflops"] / row["ref_gflops"] if row["ref_gflops"] else None
    row["kiln_peak_frac"] = row["kiln_gflops"] / peak
    return row


def race(name: str, trials: int, folder: str) -> list[dict]:
    """xgb against random at the same budget, per seed. Each tuner's best config
    is re-measured in fresh processes, three times, alternating with the
    other's (the median counts): on a shared machine one measurement of the
    same config varies by 20% or more, which would decide the race by noise."""
    op, shapes, attrs = TASKS[name]
    task = Task.create(op, shapes, attrs=attrs)
    inputs, outputs = task.data()
    data = os.path.join(folder, f"race-{name}.npz")
    np.savez(data, n_in=len(inputs), n_out=1, out0=outputs[0], **{f"in{i}": a for i, a in enumerate(inputs)})
    rows = []
    for seed in (0, 1, 2):
        found = {}
        for tuner in ("xgb", "random"):
            result = tune(task, trials=trials, tuner=tuner, seed=seed, transfer=False,
                          records=os.path.join(folder, f"race-{name}-{tuner}-{seed}.jsonl"))
            lib = os.path.join(folder, f"race-{name}-{tuner}-{seed}.so")
            tvm.compile(task.lower(result.best["config"]).sch.mod, target=task.target.tvm).export_library(lib)
            found[tuner] = (result.best["result"]["gflops"], lib, config_key(result.best["config"]))
        times = {tuner: [] for tuner in found}
        for _ in range(3):
            for tuner, (_, lib, _) in found.items():
                times[tuner].append(remeasure(lib, data)["median_s"])
        same = found["xgb"][2] == found["random"][2]
        for tuner, (tuning_gflops, _, _) in found.items():
            rows.append({"task": name, "tuner": tuner, "seed": seed, "best_gflops_while_tuning": tuning_gflops,
                         "best_gflops": task.flops / float(np.median(times[tuner])) / 1e9, "same_config": same})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--race-trials", type=int, default=32)
    parser.add_argument("--tasks", default="all", help="all, matmul, conv2d, or comma-separated names "
                                                        f"({', '.join(TASKS)})")
    parser.add_argument("--no-race", action="store_true")
    parser.add_argument("--race-only", action="store_true", help="only xgb against random")
    parser.add_argument("--json", help="also write the rows to this file")
    parser.add_argument("--measure", nargs=2, metavar=("LIB", "DATA"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        return measure_main(*args.measure)
    names = list(TASKS) if args.tasks == "all" else [n for n in TASKS if n.startswith(args.tasks)] or \
        args.tasks.split(",")
    print(f"# {kiln.cpu()}  threads={kiln.config.num_threads()}  trials={args.trials}")
    rows, races = [], []
    with tempfile.TemporaryDirectory(prefix="kiln-vs-ms-") as folder:
        for name in [] if args.race_only else names:
            row = compare(name, args.trials, folder)
            rows.append(row)
            ref = f"{row['ref_gflops']:.0f}" if row["ref_gflops"] else "-"
            print(f"{name:11s} kiln {row['kiln_gflops']:6.1f} GFLOPS ({row['kiln_spread'][0]:.0f}..{row['kiln_spread'][1]:.0f}, "
                  f"{row['kiln_peak_frac']:.0%} of the {row['peak_gflops']:.0f} FMA peak) in {row['kiln_wall_s']:5.0f} s | MetaSchedule "
                  f"{row['ms_gflops']:6.1f} ({row['ms_spread'][0]:.0f}..{row['ms_spread'][1]:.0f}) in "
                  f"{row['ms_wall_s']:5.0f} s | {row['reference']} {ref} | kiln/MS {row['vs_ms']:.2f}x, "
                  f"wall {row['wall_ratio']:.2f}x, kiln/ref {row['vs_ref'] or float('nan'):.2f}x", flush=True)
        if not args.no_race:
            races = race(names[0], args.race_trials, folder)
            for r in races:
                same = ", the same config as the other tuner's" if r["same_config"] else ""
                print(f"race {r['task']} seed {r['seed']} {r['tuner']:6s} best {r['best_gflops']:.1f} GFLOPS re-measured "
                      f"({r['best_gflops_while_tuning']:.1f} while tuning{same})", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cpu": str(kiln.cpu()), "rows": rows, "race": races}, f, indent=1)


if __name__ == "__main__":
    main()
