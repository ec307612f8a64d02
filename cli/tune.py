"""``kiln tune``: search an op's schedule knobs, measure locally or over RPC,
append every measurement to a records file that ``kiln.build`` reads.

    kiln tune matmul --shape 1024x1024x1024 --trials 64 [--tuner xgb|random|grid]
    kiln tune matmul --shape 512x512x512 --trials 64 --resume
    kiln tune conv2d --shape 1x64x56x56,64x64x3x3 --attr padding=1 --rpc 10.0.0.5:9190 --key rasp4
    kiln tune --plot curves.png [--records FILE]
"""
from __future__ import annotations

import json
import sys

from ..errors import AttrError
from ..autotune import records as rec
from .args import add_op_arguments, input_dtypes, input_shapes, parse_attrs


def register(subparsers) -> None:
    parser = subparsers.add_parser("tune", help="tune an op's schedule knobs; best configs are used by kiln.build")
    add_op_arguments(parser, required=False)
    parser.add_argument("--trials", type=int, default=64, help="measurements to make (default 64)")
    parser.add_argument("--tuner", default="xgb", choices=("xgb", "random", "grid"))
    parser.add_argument("--records", help=f"JSON Lines records file (default {rec.default_path()})")
    parser.add_argument("--resume", action="store_true", help="continue from the task's records, re-measuring none")
    parser.add_argument("--batch", type=int, default=8, help="configs built and measured per batch (default 8)")
    parser.add_argument("--early-stopping", type=int, help="stop after this many trials without improvement")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds allowed per measurement (default 30)")
    parser.add_argument("--rpc", metavar="HOST:PORT", help="measure on devices of this TVM RPC tracker")
    parser.add_argument("--key", help="the RPC device key to request from the tracker")
    parser.add_argument("--parallel", type=int, default=1, help="RPC measurements at once (default 1)")
    parser.add_argument("--plot", metavar="PNG", help="write best-GFLOPS-vs-trials curves of the records")
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    parser.set_defaults(func=run)


def run(args) -> int:
    if args.op is None:
        if not args.plot:
            raise AttrError("give an op and --shape to tune, or --plot PNG to plot records", op="tune", arg="op")
        return _plot(args, None)
    from ..autotune import LocalRunner, RPCRunner, Task, tune

    shapes = input_shapes(args.op, args.shape)
    task = Task.create(args.op, shapes, input_dtypes(args.dtype, len(shapes)), parse_attrs(args.op, args.attr),
                       args.target)
    runner = LocalRunner(timeout=args.timeout)
    if args.rpc:
        host, _, port = args.rpc.rpartition(":")
        if not host or not port.isdigit() or not args.key:
            raise AttrError(f"got --rpc {args.rpc!r} --key {args.key!r}, expected --rpc HOST:PORT and --key KEY",
                            op="tune", arg="--rpc")
        runner = RPCRunner(host, int(port), args.key, n_parallel=args.parallel, timeout=args.timeout)
    bar = None if args.json else ProgressBar(sys.stderr)
    result = tune(task, trials=args.trials, tuner=args.tuner, records=args.records, resume=args.resume,
                  runner=runner, batch_size=args.batch, early_stopping=args.early_stopping, seed=args.seed,
                  callback=bar)
    if bar:
        bar.finish()
    summary = _summary(result)
    if args.json:
        print(json.dumps(summary))
    else:
        _print_summary(summary)
    if args.plot:
        _plot(args, result)
    return 0


class ProgressBar:
    """``[ 24/64] ######------ best 812.3 GFLOPS  errors 1  0:31 elapsed, ETA 0:52``"""

    def __init__(self, stream, width: int = 24):
        self.stream, self.width = stream, width

    def __call__(self, p) -> None:
        fill = int(self.width * p.done / max(p.trials, 1))
        eta = p.eta or 0.0
        line = (f"[{p.done:>4}/{p.trials}] {'#' * fill}{'-' * (self.width - fill)} best {p.best_gflops:8.1f} GFLOPS"
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


def _summary(result) -> dict:
    best, default = result.best, result.default
    errors: dict[str, int] = {}
    for r in result.errors:
        errors[r["error"]["kind"]] = errors.get(r["error"]["kind"], 0) + 1
    return {"task": result.task.name, "attrs": result.task.attrs, "target": str(result.task.target),
            "tuner": result.tuner, "trials": len(result.records), "measured_now": result.measured,
            "elapsed_s": round(result.elapsed_s, 2), "records": str(result.records_path),
            "best_gflops": best["result"]["gflops"] if best else None, "best_config": best["config"] if best else None,
            "best_ms": best["result"]["median_s"] * 1e3 if best else None,
            "default_gflops": default["result"]["gflops"] if default else None, "errors": errors}


def _print_summary(s: dict) -> None:
    print(f"{s['task']} on {s['target']}: {s['trials']} trials ({s['measured_now']} measured now, "
          f"{s['elapsed_s']:.0f} s, tuner {s['tuner']})")
    if s["best_gflops"] is None:
        print("  no config measured successfully")
    else:
        gain = f" ({s['best_gflops'] / s['default_gflops']:.2f}x the default {s['default_gflops']:.1f})" \
            if s["default_gflops"] else ""
        print(f"  best     {s['best_gflops']:.1f} GFLOPS, {s['best_ms']:.3f} ms{gain}")
        print(f"  config   {json.dumps(s['best_config'])}")
    if s["errors"]:
        print(f"  errors   {', '.join(f'{k}: {v}' for k, v in sorted(s['errors'].items()))}")
    print(f"  records  {s['records']}  (kiln.build uses the best config from now on)")


def _plot(args, result) -> int:
    from ..autotune.plot import plot

    path = args.records or rec.default_path()
    recs = rec.load(path, result.task.key if result else None)
    out = plot(recs, args.plot)
    print(f"tuning curves of {len(recs)} records written to {out}")
    return 0
