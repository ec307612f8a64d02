"""``kiln tune --model``: tune every kernel a model runs, under one budget.

    kiln tune --model cnn --budget 10m [--batch-size 16] [--training]
    kiln tune --model model.npz --trials 300 --resume

The model is a zoo name (built for the digits images, 1x8x8) or a checkpoint
written by ``kiln train --save``. Its kernels are extracted
(``kiln.autotune.extract``) and tuned by the task scheduler; a line per round
shows the task tuned and the model's estimated time. It ends with the model
measured for real, untuned against tuned: exported and run by a
``Predictor`` at the batch size, or with ``--training`` one compiled
training step, and says where the records went: ``kiln export`` and ``kiln
train`` use those of kiln's default file from then on, those of another
with ``--records FILE``.
"""
from __future__ import annotations

import json
import math
import re
import shlex
import sys

from ..errors import AttrError

#: the input of a zoo model tuned by name: one digits image
ZOO_SHAPE = (1, 8, 8)
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*$")


def duration(text: str) -> float:
    """``90``, ``90s``, ``10m`` or ``1.5h`` as seconds (argparse ``type=``)."""
    import argparse

    found = _DURATION.match(text)
    value = float(found.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[found.group(2)] if found else 0.0
    if not found or not 0 < value <= 7 * 86400:
        raise argparse.ArgumentTypeError(f"got {text!r}, expected a duration such as 600, 90s, 10m or 1.5h "
                                         "(at most a week)")
    return value


def load_model(name: str, batch: int, input_shapes=(), training: bool = False):
    """``(model, example batch)`` of a zoo name, a checkpoint path or an
    ``.onnx`` file (its example: zero inputs by name, ``input_shapes``
    fixing the dims the file leaves symbolic)."""
    import numpy as np

    from ..nn.train import MODELS, build_model

    if name in MODELS:
        return build_model(name, ZOO_SHAPE, classes=10), np.zeros((batch, *ZOO_SHAPE), "float32")
    if name.lower().endswith(".onnx"):
        if training:
            raise AttrError("--training tunes a classifier's training step (zoo models, checkpoints); an .onnx "
                            "model is tuned for inference", arg="--training")
        from ..frontend import from_onnx
        from .export import example_inputs, parse_input_shapes

        model = from_onnx(name, parse_input_shapes(list(input_shapes)))
        example, _ = example_inputs(model, where="kiln tune")
        return model, {k: np.repeat(v, batch, axis=0) for k, v in example.items()}
    if not name.endswith(".npz"):
        raise AttrError(f"got {name!r}, expected a zoo model ({', '.join(MODELS)}), a checkpoint MODEL.npz "
                        "written by kiln train --save or an .onnx model", arg="--model")
    from ..nn.checkpoint import example_input, load_checkpoint

    model, spec = load_checkpoint(name)
    if training and spec.get("dataset") == "text":
        raise AttrError("--training tunes a classifier's training step; a language model's checkpoint is tuned for "
                        "inference (without --training)", arg="--training")
    return model, example_input(spec, batch)


def run(args) -> int:

    from ..autotune import LocalRunner, apply_records
    from ..autotune.model import model_times, tune_model
    from ..bench.machine import fma_peak
    from ..runtime.device import as_target

    if args.op is not None or args.shape is not None:
        raise AttrError("got an op with --model, expected one or the other", arg="--model")
    if args.trials is None and args.budget is None:
        raise AttrError("got neither --trials nor --budget, expected the budget of the model's tuning "
                        "(e.g. --budget 10m)", arg="--budget")
    if args.rpc:
        raise AttrError("got --rpc with --model, expected local measurement (tune a model's tasks over RPC one "
                        "op at a time)", arg="--rpc")
    if as_target(args.target).kind != "cpu":
        raise AttrError(f"got --target {args.target} with --model, expected cpu: the model is measured as it is "
                        "exported and trained, on the CPU (CUDA kernels are tuned one op at a time)", arg="--target")
    model, example = load_model(args.model, args.batch_size, args.input_shape, args.training)
    runner = LocalRunner(timeout=args.timeout)

    def progress(plan) -> None:
        args.measured = plan.measured  # what an interrupt says (cli/tune.py)
        if not args.json:
            _progress(plan)

    try:
        plan = tune_model(model, example, training=args.training, trials=args.trials, budget_s=args.budget,
                          records=args.records, resume=args.resume, tuner=args.tuner, seed=args.seed,
                          runner=runner, callback=progress, target=args.target, round_trials=args.batch,
                          patience=args.early_stopping or 32)
    finally:
        runner.close()
    if args.records:
        apply_records(args.records)  # the tuned model is built from them (kiln's default file is always read)
    print("measuring the model untuned and tuned...", file=sys.stderr, flush=True)
    times = model_times(model, example, training=args.training, target=args.target)
    summary = _summary(args, plan, times, fma_peak(args.target))
    print(json.dumps(summary) if args.json else _table(summary))
    return 0


def _progress(plan) -> None:
    state = plan.current
    budget = f"/{_clock(plan.budget_s)}" if plan.budget_s else ""
    trials = f"/{plan.trial_budget}" if plan.trial_budget else ""
    best = f"{state.best_s * 1e3:.4f} ms" if state.best_s < math.inf else "-"
    name = task_names(plan.states)[plan.states.index(state)]
    print(f"[{plan.trials:>5}{trials} trials  {_clock(plan.elapsed)}{budget}] {name} x{state.calls}: "
          f"best {best}  model est. {plan.estimate_s() * 1e3:.4f} ms (untuned {plan.estimate_s(True) * 1e3:.4f})",
          file=sys.stderr, flush=True)


def _clock(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m}:{s:02d}"


def _summary(args, plan, times: dict, peak_gflops: float) -> dict:
    from ..autotune.records import path_of

    tasks = [{"task": name, "calls": s.calls, "trials": s.trials, "stopped": s.stopped or None,
              "confirmed": s.confirmed, "improved": s.improved,
              "default_ms": s.default_s * 1e3 if s.default_s < math.inf else None,
              "best_ms": s.best_s * 1e3 if s.best_s < math.inf else None,
              "peak_ms": peak_ms(s.model_task.task.workload, peak_gflops)}
             for s, name in zip(plan.states, task_names(plan.states))]
    return {"model": args.model, "batch": args.batch_size, "training": args.training, "trials": plan.trials,
            "fma_peak_gflops": peak_gflops,
            "measured_now": plan.measured, "rounds": plan.rounds, "elapsed_s": round(plan.elapsed, 1),
            "estimate_untuned_ms": plan.estimate_s(True) * 1e3, "estimate_tuned_ms": plan.estimate_s() * 1e3,
            "untuned_ms": times["untuned_s"] * 1e3, "tuned_ms": times["tuned_s"] * 1e3,
            "speedup": times["untuned_s"] / times["tuned_s"], "same_kernels": not any(t["improved"] for t in tasks),
            "records": str(path_of(args.records)), "default_records": not args.records, "tasks": tasks,
            "unreached": [name for s, name in zip(plan.states, task_names(plan.states)) if s in plan.unreached]}


def task_names(states) -> list[str]:
    """Each state's task named as ``Task.name`` (op and shapes); tasks that
    share that name (``multiply_scalar(16)`` by 0.9 and by 0.01) with the
    attributes that tell them apart."""
    names = [s.model_task.name for s in states]
    shown = []
    for state, name in zip(states, names):
        attrs = state.model_task.task.attrs
        twins = [s.model_task.task.attrs for s, n in zip(states, names) if n == name]
        differ = [k for k in attrs if any(t.get(k) != attrs[k] for t in twins)]
        shown.append(f"{name[:-1]}; {', '.join(f'{k}={attrs[k]!r}' for k in differ)})" if differ else name)
    return shown


def peak_ms(workload, peak_gflops: float) -> float | None:
    """The arithmetic of the op's kernel at the FMA peak, in ms: how fast it
    could be (a Winograd conv's, its products in the transformed domain:
    ``Op.kernel_flops``); None for an op without arithmetic to speak of
    (memory-bound)."""
    flops = workload.op.kernel_flops([tuple(s) for s in workload.shapes], **workload.attrs)
    return 1e3 * flops / (peak_gflops * 1e9) if flops > 0 and peak_gflops > 0 else None


def _table(s: dict) -> str:
    width = max(len("task"), *(len(t["task"]) for t in s["tasks"]))
    lines = [f"{s['model']} ({'training step' if s['training'] else 'inference'}, batch {s['batch']}): "
             f"{s['trials']} trials ({s['measured_now']} measured now) in {s['elapsed_s']:.0f} s",
             f"  {'task':<{width}}  calls  trials  default ms    best ms  at peak ms  of peak"]
    for t in s["tasks"]:
        shown = [f"{t[k]:10.4f}" if t[k] is not None else f"{'-':>10}" for k in ("default_ms", "best_ms", "peak_ms")]
        share = f"{t['peak_ms'] / t['best_ms']:>7.0%}" if t["peak_ms"] and t["best_ms"] else f"{'-':>7}"
        notes = [word for word, on in (("confirmed", t["confirmed"]), ("default best", t["trials"] and not t["improved"]))
                 if on]
        lines.append(f"  {t['task']:<{width}}  {t['calls']:>5}  {t['trials']:>6}  {shown[0]} {shown[1]} {shown[2]}  "
                     f"{share}{''.join('  ' + n for n in notes)}")
    lines.append(f"  at peak ms: the kernel's arithmetic at the FMA peak ({s['fma_peak_gflops']:.0f} GFLOPS measured "
                 "now; a Winograd conv's products); - for memory-bound ops")
    lines.append(f"  kernels (calls x time): {s['estimate_untuned_ms']:.4f} -> {s['estimate_tuned_ms']:.4f} ms")
    lines.append(f"  the model, measured:    {s['untuned_ms']:.4f} -> {s['tuned_ms']:.4f} ms "
                 f"({s['speedup']:.2f}x)")
    if s.get("unreached"):
        lines.append(f"  the budget ran out before {len(s['unreached'])} of {len(s['tasks'])} tasks got a first round "
                     f"({', '.join(s['unreached'])}): they run untuned; a longer --budget reaches them")
    if s["same_kernels"]:
        lines.append("  no task's best config is another than its default: tuned, the model runs the kernels it ran "
                     "untuned, and the difference measured is the noise of the measurement")
    if s["default_records"]:
        lines.append(f"  records {s['records']}  (kiln's default records: kiln export, kiln train and kiln.build "
                     "use the tuned configs from now on)")
    else:
        lines.append(f"  records {s['records']}  (use them with kiln export/train --records "
                     f"{shlex.quote(s['records'])}, or kiln.autotune.apply_records({s['records']!r}) before "
                     "kiln.export or kiln.compile)")
    return "\n".join(lines)
