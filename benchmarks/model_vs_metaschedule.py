"""kiln's model tuner against TVM MetaSchedule on one whole model, at the same trial budget.

Both tuners get the same graph: the model's eval forward at ``--batch``,
traced and optimized by kiln's export passes (folded, fused, weights
pre-packed) and lowered to a Relax module of unscheduled TE PrimFuncs
(``to_relax``). kiln tunes it with ``tune_model`` (its task scheduler and xgb
tuner); MetaSchedule with ``tune_relax`` (gradient task scheduler,
evolutionary search, xgb cost model). Both measure with 1 call per repeat, 5
repeats, >= 40 ms per repeat, and take ``--round`` trials per round
(``round_trials`` / ``num_trials_per_iter``) out of ``--trials`` in all.
kiln starts from an empty cache (``KILN_CACHE_DIR`` is a temporary folder).
One difference by default: the export runs 3x3 stride-1 convs as Winograd
convolutions (``conv2d_winograd``), whose kernel MetaSchedule 0.27 cannot
schedule (its search fails in ``ReverseComputeAt``); MetaSchedule gets those
convs direct (``optimize(..., winograd=False)``), the graph TVM's own
lowering would give it. ``--metaschedule-winograd`` gives it kiln's graph as it is.

Reported: each tuner's wall time, and the latency of the model exported
untuned, exported with kiln's records (both run by a ``Predictor``) and built
with MetaSchedule's database (``MetaScheduleApplyDatabase`` on the same
module, compiled with kiln's export pipeline, run by a ``VirtualMachine``),
measured interleaved in this process (blocks of ``--number`` calls,
``--repeat`` rounds, median). Each output is checked against the model's
eager eval forward (rtol = atol = 1e-4).

Run: ``python benchmarks/model_vs_metaschedule.py [--model cnn] [--batch 16] [--trials 200] [--json FILE]``.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import tvm
import tvm_ffi
from tvm import relax

TIMING = {"number": 1, "repeat": 5, "min_repeat_ms": 40}


def aligned(shape, rng) -> np.ndarray:
    """A random float32 array on a 64-byte boundary (read in place by both runtimes)."""
    n = int(np.prod(shape))
    buf = np.empty(n * 4 + 64, np.uint8)
    start = -buf.ctypes.data % 64
    x = buf[start:start + n * 4].view(np.float32).reshape(shape)
    x[...] = rng.standard_normal(shape)
    return x


def tune_kiln(model, x, trials: int, round_trials: int, folder: Path) -> dict:
    import kiln
    from kiln.autotune import LocalRunner, apply_records, tune_model
    from kiln.runtime.build import untuned
    from kiln.runtime.predictor import Predictor

    records, runner = folder / "kiln-records.jsonl", LocalRunner(**TIMING)
    start = time.perf_counter()
    try:
        plan = tune_model(model, x, trials=trials, records=records, runner=runner, round_trials=round_trials)
    finally:
        runner.close()
    wall = time.perf_counter() - start
    apply_records(records)
    with untuned():
        plain = Predictor(kiln.export(model, x, folder / "untuned.so", batches=()))
    tuned = Predictor(kiln.export(model, x, folder / "tuned.so"))
    entries = [e["name"] for e in tuned.meta["entries"]]
    if f"main_b{x.shape[0]}" not in entries:
        print(f"warning: the tuned export has no main_b{x.shape[0]} entry ({entries}): it runs untuned kernels")
    return {"wall_s": wall, "measured": plan.measured, "tasks": len(plan.states),
            "tasks_tuned": sum(s.trials > 0 for s in plan.states), "entries": entries,
            "calls": {"kiln untuned": lambda: plain(x), "kiln tuned": lambda: tuned(x)}}


def tune_metaschedule(mod, kiln_target, x, trials: int, round_trials: int, folder: Path) -> dict:
    import kiln
    from kiln.graph.module import compile_module
    from tvm.s_tir import meta_schedule as ms

    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
    target = tvm.target.Target({"kind": "llvm", "mcpu": kiln_target.mcpu, "num-cores": kiln.config.num_threads()})
    runner = ms.runner.LocalRunner(evaluator_config=ms.runner.EvaluatorConfig(**TIMING))
    # its 30 s default build timeout is too short on a 2-core machine, where a worker spends seconds importing TVM
    builder = ms.builder.LocalBuilder(timeout_sec=120)
    start = time.perf_counter()
    db = ms.relax_integration.tune_relax(mod, {}, target, str(folder / "ms"), max_trials_global=trials,
                                         num_trials_per_iter=round_trials, builder=builder, runner=runner,
                                         cost_model="xgb", seed=0)
    wall = time.perf_counter() - start
    # compile_relax would run LegalizeOps/FuseOps/FuseTIR first, re-fusing kiln's kernels into functions the
    # database has no records of; the database is applied to the module as tuned instead, then compiled as
    # kiln's exports are
    with target, db, tvm.transform.PassContext(opt_level=3):
        scheduled = relax.transform.MetaScheduleApplyDatabase()(mod)
    kernels = [gv for gv, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    applied = sum(not tvm_ffi.structural_equal(mod[gv], scheduled[gv]) for gv in kernels)
    lib = str(folder / "ms.so")
    compile_module(scheduled, SimpleNamespace(tvm=target)).export_library(lib)
    main = relax.VirtualMachine(tvm.runtime.load_module(lib), tvm.cpu())["main"]
    arg = tvm_ffi.from_dlpack(x.__dlpack__(max_version=(1, 0)))  # in place, as a Predictor reads it
    return {"wall_s": wall, "measured": len(db.get_all_tuning_records()), "tasks": len(kernels),
            "tasks_tuned": applied, "calls": {"MetaSchedule": lambda: np.from_dlpack(main(arg))}}


def interleaved(calls: dict, number: int, repeat: int) -> dict:
    times = {name: [] for name in calls}
    for _ in range(repeat):
        for name, call in calls.items():
            call()
            start = time.perf_counter()
            for _ in range(number):
                call()
            times[name].append((time.perf_counter() - start) / number)
    return {name: float(np.median(t)) for name, t in times.items()}


def run(args) -> dict:
    import kiln
    from kiln.graph.export import inference_graph, optimize
    from kiln.graph.trace import trace
    from kiln.graph.lower import to_relax
    from kiln.nn.train import build_model
    from kiln.runtime.device import as_target

    model = build_model(args.model, (1, 8, 8), 10)
    model.eval()
    x = aligned((args.batch, 1, 8, 8), np.random.default_rng(0))
    expected = model(kiln.nn.Tensor(x)).numpy()
    target = as_target(None)
    graph = inference_graph(model, x, target) if args.metaschedule_winograd else \
        optimize(trace(model, x), target, winograd=False)
    mod, _ = to_relax(graph.specialized(args.batch), "main")
    folder = Path(args.folder)
    ours = tune_kiln(model, x, args.trials, args.round, folder)
    print(f"kiln: {ours['measured']} trials in {ours['wall_s']:.1f} s", flush=True)
    theirs = tune_metaschedule(mod, target, x, args.trials, args.round, folder)
    print(f"MetaSchedule: {theirs['measured']} trials in {theirs['wall_s']:.1f} s", flush=True)
    calls = {**ours.pop("calls"), **theirs.pop("calls")}
    errors = {name: float(np.max(np.abs(call() - expected))) for name, call in calls.items()}
    correct = {name: bool(np.allclose(call(), expected, rtol=1e-4, atol=1e-4)) for name, call in calls.items()}
    latency = interleaved(calls, args.number, args.repeat)
    return {"cpu": str(kiln.cpu()), "threads": kiln.config.num_threads(), "model": args.model, "batch": args.batch,
            "trials": args.trials, "round_trials": args.round, "kiln": ours, "metaschedule": theirs,
            "latency_s": latency, "max_abs_error": errors, "correct": correct}


def table(r: dict) -> str:
    lat, base = r["latency_s"], r["latency_s"]["kiln untuned"]
    tuning = {"kiln tuned": r["kiln"], "MetaSchedule": r["metaschedule"]}
    lines = [f"# {r['model']}, batch {r['batch']}, {r['trials']} trials ({r['round_trials']} a round), "
             f"{r['cpu']}, {r['threads']} threads", "",
             "| build | tuning wall (s) | trials measured | kernels tuned | latency (us) | speedup vs untuned "
             "| max abs error |", "|---|---:|---:|---:|---:|---:|---:|"]
    for name, s in lat.items():
        t = tuning.get(name)
        cells = [f"{t['wall_s']:.1f}", str(t["measured"]), f"{t['tasks_tuned']}/{t['tasks']}"] if t else ["-"] * 3
        ok = "" if r["correct"][name] else " WRONG"
        lines.append(f"| {name} | {' | '.join(cells)} | {s * 1e6:.1f} | {base / s:.2f}x "
                     f"| {r['max_abs_error'][name]:.1e}{ok} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="cnn", help="cnn, mlp, mlp-residual or resnet (inputs 1x8x8)")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--trials", type=int, default=200, help="measurements per tuner, in all")
    parser.add_argument("--round", type=int, default=8, help="trials per round (kiln) / iteration (MetaSchedule)")
    parser.add_argument("--number", type=int, default=50, help="calls per timed block")
    parser.add_argument("--repeat", type=int, default=7, help="timed blocks per build")
    parser.add_argument("--metaschedule-winograd", action="store_true",
                        help="give MetaSchedule the exported graph as it is; by default its Winograd convs stay "
                             "direct (MetaSchedule 0.27 fails on conv2d_winograd's kernel in ReverseComputeAt)")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kiln-model-vs-ms-") as folder:
        os.environ["KILN_CACHE_DIR"] = str(Path(folder) / "cache")  # no records or kernels from earlier runs
        args.folder = folder
        result = run(args)
    print(table(result))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    if not all(result["correct"].values()):
        raise SystemExit("some build's output differs from the model's eval forward")


if __name__ == "__main__":
    main()
