"""``kiln tune``: search an op's schedule knobs, measure locally or over RPC,
append every measurement to a records file that ``kiln.build`` reads.

    kiln tune matmul --shape 1024x1024x1024 --trials 64 [--tuner xgb|random|grid]
    kiln tune matmul --shape 512x512x512 --trials 64 --resume
    kiln tune conv2d --shape 1x64x56x56,64x64x3x3 --attr padding=1 --rpc 10.0.0.5:9190 --key rasp4
    kiln tune --plot curves.png [--records FILE]
    kiln tune --model cnn --budget 10m [--batch-size 16] [--training]   (cli/tune_model.py)

Everything that can be checked is checked before the first measurement: the
op and shapes, the records and plot paths, matplotlib for ``--plot``, and the
RPC tracker and its devices for ``--rpc``.
"""
from __future__ import annotations

import json
import os
import shlex
import sys

from .. import config
from ..errors import AttrError, TargetError
from ..outputs import check_plot_path
from . import tune_model
from .tune_model import duration
from .args import add_op_arguments, input_dtypes, input_shapes, parse_attrs, positive_int, seconds, seed_int

#: how far a kept config's re-timing may be from its trial's time before the summary says the machine's speed moved
SHIFT = 1.5


def register(subparsers) -> None:
    parser = subparsers.add_parser("tune", help="tune an op's schedule knobs; best configs are used by kiln.build")
    add_op_arguments(parser, required=False, records=False)
    parser.add_argument("--trials", type=positive_int,
                        help="measurements to make (default 64 for an op; for --model, in all, resumed ones included)")
    parser.add_argument("--model", metavar="NAME|MODEL.npz|MODEL.onnx",
                        help="tune every kernel of a model: a zoo model (mlp, mlp-residual, cnn, resnet, for digits "
                             "images), a checkpoint from kiln train --save or an .onnx model; kiln export and kiln "
                             "train use the records")
    parser.add_argument("--input-shape", action="append", default=[], metavar="NAME=DIMS",
                        help="with --model MODEL.onnx: an input's shape where the file leaves dims symbolic besides "
                             "the batch (repeated per input)")
    parser.add_argument("--budget", type=duration, metavar="TIME",
                        help="with --model: time to spend, e.g. 600, 90s, 10m, 1.5h (and/or --trials)")
    parser.add_argument("--batch-size", type=positive_int, default=16,
                        help="with --model: the batch size to tune the model at (default 16)")
    parser.add_argument("--training", action="store_true",
                        help="with --model: tune one training step's kernels (forward, backward, Adam's updates), "
                             "as kiln train compiles it")
    parser.add_argument("--tuner", default="xgb", choices=("xgb", "random", "grid"),
                        help="how configs are chosen: xgb (an XGBoost cost model ranks candidates; default), "
                             "random draws, or grid (every config in order, the default first)")
    parser.add_argument("--records", metavar="FILE",
                        help=f"JSON Lines records file to append to (default {config.records_path()}, which "
                             "kiln.build always reads; another file is used with kiln show/bench --records FILE)")
    parser.add_argument("--resume", action="store_true", help="continue from the task's records, re-measuring none")
    parser.add_argument("--batch", type=positive_int, default=8,
                        help="configs built and measured per batch, and per round of a --model tune (default 8)")
    parser.add_argument("--early-stopping", type=positive_int, metavar="N",
                        help="stop after N trials without a faster config")
    parser.add_argument("--seed", type=seed_int, default=0,
                        help="seed of the tuner's random choices (default 0): the same seed proposes the same configs")
    parser.add_argument("--timeout", type=seconds, default=30.0, help="seconds allowed per measurement (default 30)")
    parser.add_argument("--rpc", metavar="HOST:PORT", help="measure on devices of this TVM RPC tracker")
    parser.add_argument("--key", help="the RPC device key to request from the tracker (with --rpc)")
    parser.add_argument("--parallel", type=positive_int, metavar="N",
                        help="RPC measurements at once, one per device (with --rpc; default 1)")
    parser.add_argument("--plot", metavar="PNG",
                        help="write best-speed-vs-trials curves of the records (needs matplotlib: the plot extra)")
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    parser.set_defaults(func=run)


def run(args) -> int:
    args.measured = 0  # trials measured so far, kept by the progress callbacks: what an interrupt can say
    try:
        return _run(args)
    except KeyboardInterrupt:  # each batch of measurements was appended as it ended: none is lost
        print(_interrupted(args), file=sys.stderr)
        return 130


def _interrupted(args) -> str:
    from ..autotune import records as rec

    if not args.measured:
        return "kiln tune: interrupted before the first trial was measured: no records were written"
    return (f"kiln tune: interrupted; {rec.path_of(args.records)} holds the {args.measured} "
            f"trial{'s' if args.measured != 1 else ''} measured: the same command with --resume goes on from them "
            "without measuring them again")


def _run(args) -> int:
    if args.model is not None:
        if args.plot:
            raise AttrError("got --plot with --model, expected it alone (kiln tune --plot PNG plots the records)",
                            arg="--plot")
        return tune_model.run(args)
    if args.budget is not None or args.training:
        raise AttrError(f"got {'--budget' if args.budget is not None else '--training'} without --model, expected "
                        "it with --model", arg="--budget" if args.budget is not None else "--training")
    if args.plot:
        check_plot_path(args.plot)  # a missing matplotlib is said now, not after the tuning
    if args.op is None:
        if not args.plot:
            raise AttrError("give an op and --shape to tune, or --plot PNG to plot records", arg="op")
        return _plot(args, None)
    from ..autotune import Task, tune

    shapes = input_shapes(args.op, args.shape)
    task = Task.create(args.op, shapes, input_dtypes(args.dtype, len(shapes)), parse_attrs(args.op, args.attr),
                       args.target)
    runner = _runner(args, task)
    bar = None if args.json else ProgressBar(sys.stderr, task.unit)

    def progress(p) -> None:
        args.measured = p.done - p.resumed
        if bar:
            bar(p)

    try:
        result = tune(task, trials=args.trials or 64, tuner=args.tuner, records=args.records, resume=args.resume,
                      runner=runner, batch_size=args.batch, early_stopping=args.early_stopping, seed=args.seed,
                      callback=progress)
    finally:
        runner.close()
        if bar:
            bar.finish()
    summary = _summary(result, args.trials or 64, args.early_stopping, default_records=not args.records)
    if args.json:
        print(json.dumps(summary))
    else:
        _print_summary(summary)
    if args.plot:
        _plot(args, result)
    return 0


def _runner(args, task):
    import tvm

    from ..autotune import LocalRunner, RPCRunner

    if not args.rpc:
        if args.key or args.parallel:
            raise AttrError("got --key/--parallel without --rpc, expected them with --rpc HOST:PORT",
                            arg="--key" if args.key else "--parallel")
        if task.target.kind == "cuda" and not tvm.cuda(0).exist:  # every trial would be built, then refused
            raise TargetError("no CUDA device is present on this machine to measure on: tune where there is one, "
                              "or on one behind a TVM RPC tracker (--rpc HOST:PORT --key KEY)", arg="--target")
        return LocalRunner(timeout=args.timeout)
    host, _, port = args.rpc.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536 or not args.key:
        raise AttrError(f"got --rpc {args.rpc!r} --key {args.key!r}, expected --rpc HOST:PORT (port 1-65535) "
                        "and --key KEY", arg="--rpc")
    return RPCRunner(host.strip("[]"), int(port), args.key, n_parallel=args.parallel or 1, timeout=args.timeout)


class ProgressBar:
    """``[ 24/64] ######------ best 812.3 GFLOPS  errors 1  0:31 elapsed, ETA 0:52``"""

    def __init__(self, stream, unit: str = "GFLOPS", width: int = 24):
        self.stream, self.unit, self.width = stream, unit, width

    def __call__(self, p) -> None:
        fill = int(self.width * p.done / max(p.trials, 1))
        eta = p.eta or 0.0
        line = (f"[{p.done:>4}/{p.trials}] {'#' * fill}{'-' * (self.width - fill)} best {p.best_rate:8.1f} {self.unit}"
                f"  errors {p.errors}  {_clock(p.elapsed)} elapsed, ETA {_clock(eta)}")
        end = "\r" if self.stream.isatty() else "\n"
        self.stream.write(line + end)
        self.stream.flush()

    def finish(self) -> None:
        if self.stream.isatty():
            self.stream.write("\n")


def _clock(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m // 60}:{m % 60:02d}:{s:02d}" if m >= 60 else f"{m}:{s:02d}"


def _summary(result, asked: int, early_stopping: int | None, default_records: bool) -> dict:
    """The run as its progress bar and plot showed it: its fastest trial (``best``) against the first config's
    (``default``); then the config kept (``kept``), which the fastest trials' configs re-timed beside the first
    decide where a confirmation ran (``retimed``, ``records.best``). That re-timing comes at another moment
    than the trials, so on a machine whose speed shifts (other work on it) its times may differ from theirs."""
    from ..autotune import records as rec

    task, kept, first = result.task, result.best, {"config": result.default_config}
    ok = [r for r in result.trials if rec.is_ok(r)]
    best = min(ok, key=_median, default=None)
    default = rec.baseline(result.trials, result.default_config)  # the first config's first trial
    kept_trial = min((r for r in ok if _same(r, kept)), key=_median, default=None)  # the kept config's fastest
    retimed = kept is not None and rec.is_confirmed(kept)
    errors: dict[str, int] = {}
    for r in result.errors:
        errors[r["error"]["kind"]] = errors.get(r["error"]["kind"], 0) + 1
    summary = {"task": task.name, "attrs": task.attrs, "target": str(task.target), "tuner": result.tuner,
               "trials": len(result.trials), "trials_asked": asked, "stopped": _stopped(result, early_stopping),
               "measured_now": result.measured, "elapsed_s": round(result.elapsed_s, 2),
               "records": str(result.records_path), "default_records": default_records, "unit": task.unit,
               "best_config": best["config"] if best else None, "best_trial": _number(best),
               "best_is_default": _same(best, first), "kept_config": kept["config"] if kept else None,
               "kept_is_default": _same(kept, first), "kept_is_best": _same(kept, best),
               "kept_trial": _number(kept_trial), "retimed": retimed, "errors": errors}
    for name, r in (("best", best), ("default", default), ("kept", kept), ("kept_trial", kept_trial),
                    ("retimed_default", result.default if retimed else None)):
        seconds = _median(r) if r else None
        summary[f"{name}_ms"] = seconds * 1e3 if r else None
        summary[f"{name}_rate"] = task.rate(seconds) if r else None  # in summary["unit"]
        summary[f"{name}_gflops"] = task.flops / seconds / 1e9 if r and seconds > 0 else None
    return summary


def _median(record: dict) -> float:
    return record["result"]["median_s"]


def _same(a: dict | None, b: dict | None) -> bool:
    """Whether two records hold one config (a missing record holds none)."""
    from ..schedules import config_key

    return a is not None and b is not None and config_key(a["config"]) == config_key(b["config"])


def _number(record: dict | None) -> int | None:
    """A trial's number as the progress bar and the plot count them, from 1."""
    return record["trial"] + 1 if record and record.get("trial") is not None else None


def _stopped(result, early_stopping: int | None) -> str | None:
    """Why fewer trials ran than were asked, or None."""
    if result.stopped == "space":
        return f"the space has only {result.configs} configs, all measured"
    if result.stopped == "early_stopping":
        return f"{early_stopping} trials or more found no faster config (--early-stopping {early_stopping})"
    return None


def _versus(ms: float | None, default_ms: float | None) -> str:
    """``ms`` against the default's time as it reads: faster, slower or, to the two decimals shown, as fast."""
    if not ms or not default_ms:
        return ""
    ratio = default_ms / ms
    if f"{ratio:.2f}" == "1.00":
        return f", as fast as the default ({default_ms:.3f} ms)"
    faster = ratio > 1
    return f", {ratio if faster else 1 / ratio:.2f}x {'faster' if faster else 'slower'} than the default's " \
        f"{default_ms:.3f} ms"


def _print_summary(s: dict) -> None:
    print(f"{s['task']} on {s['target']}: {s['trials']} trials ({s['measured_now']} measured now, "
          f"{s['elapsed_s']:.0f} s, tuner {s['tuner']})")
    if s["stopped"]:
        print(f"  stopped  at {s['trials']} of the {s['trials_asked']} trials asked: {s['stopped']}")
    if s["best_ms"] is None:
        print("  no config measured successfully")
    else:
        speed = f"{s['best_rate']:.1f} {s['unit']}, {s['best_ms']:.3f} ms"
        trial = f" in trial {s['best_trial']}" if s["best_trial"] else ""
        print(f"  best     {speed}{trial}: the default config" if s["best_is_default"] else
              f"  best     {speed}{trial}{_versus(s['best_ms'], s['default_ms'])}")
    if s["retimed"]:
        _print_retimed(s)
    if s["kept_config"] is not None:
        print(f"  kept     {json.dumps(s['kept_config'])}")
    if s["errors"]:
        print(f"  errors   {', '.join(f'{k}: {v}' for k, v in sorted(s['errors'].items()))}")
    if s["default_records"]:
        print(f"  records  {s['records']}  (kiln's default records: kiln.build, kiln show and kiln bench use the "
              "best config from now on)")
    else:
        print(f"  records  {s['records']}  (use it with kiln show/bench --records {shlex.quote(s['records'])}, or "
              f"kiln.autotune.apply_records({s['records']!r}) before kiln.build)")


def _print_retimed(s: dict) -> None:
    """The confirmation's verdict: the fastest trials' configs timed again beside the default, in turns."""
    speed = f"{s['kept_rate']:.1f} {s['unit']}, {s['kept_ms']:.3f} ms"
    if s["kept_is_default"]:
        print(f"  re-timed the fastest configs beside the default, in turns: none was faster in most turns; the "
              f"default is kept ({speed})")
    else:
        which = "the best trial's config" if s["kept_is_best"] else \
            f"trial {s['kept_trial']}'s config" if s["kept_trial"] else "a config"
        print(f"  re-timed beside the default, in turns: {which} is kept, {speed}"
              f"{_versus(s['kept_ms'], s['retimed_default_ms'])}")
    shift = s["kept_trial_ms"] / s["kept_ms"] if s["kept_trial_ms"] and s["kept_ms"] else 1.0
    if not 1 / SHIFT <= shift <= SHIFT:
        print(f"  note     re-timed, it ran {max(shift, 1 / shift):.1f}x {'faster' if shift > 1 else 'slower'} "
              "than in its trial: the machine's speed changed between them (other work running on it?)")


def _plot(args, result) -> int:
    from ..autotune import records as rec
    from ..autotune.plot import plot

    path = rec.path_of(args.records)
    if result is None and not os.path.isfile(path):
        raise AttrError(f"no records file at {path} to plot", arg="--records")
    recs = rec.load(path, result.task.key if result else None)
    out = plot(recs, args.plot)
    # after a --json summary, stdout must stay one JSON object
    trials = sum(1 for r in recs if not rec.is_confirmed(r))
    print(f"tuning curves of {trials} trials written to {out}", file=sys.stderr if args.json else sys.stdout)
    return 0
