"""ResNet-18's convolutions, default and tuned, against PyTorch (oneDNN) in one run.

For each layer of the CPU suite (``kiln.bench.suites.cpu.CONV_LAYERS``) and
batch, the conv2d task is tuned from scratch for ``--trials`` measurements
(xgb, a fresh records file, no transfer from other shapes), then three sides
are timed interleaved on the same inputs: kiln's default config, the best
config of the tune, and ``torch.nn.functional.conv2d``. Ratios are kiln's
speed over PyTorch's (above 1 kiln is faster); the training issue's targets
are 1.0 with defaults and 1.1 tuned.

Run: ``python benchmarks/conv_tuned.py [--trials 64] [--batches 1,8]
[--layers 0,1,...] [--json PATH]``; ``--summarize`` prints the table of an
earlier run's JSON.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import kiln
from kiln.autotune import Task, tune
from kiln.bench.machine import fma_peak
from kiln.bench.suites.cpu import CONV_LAYERS
from kiln.outputs import atomic_path
from kiln.bench.timing import NOISY_SPREAD, calls_sampler, compare, kernel_sampler
from kiln.runtime.measure import random_inputs, work

DEFAULT_TARGET, TUNED_TARGET = 1.0, 1.1


def layer_name(batch: int, layer: tuple) -> str:
    c, h, o, k, s, _ = layer
    return f"b{batch} {c}x{h}x{h}->{o} k{k} s{s}"


def run_layer(batch: int, layer: tuple, trials: int, folder: str, repeat: int) -> dict:
    import torch

    c, h, o, k, s, p = layer
    shapes, attrs = [(batch, c, h, h), (o, c, k, k)], {"stride": s, "padding": p}
    task = Task.create("conv2d", shapes, attrs=attrs)
    start = time.perf_counter()
    result = tune(task, trials=trials, tuner="xgb", records=os.path.join(folder, f"{task.key}.jsonl"), seed=0,
                  transfer=False)
    wall = time.perf_counter() - start
    default = kiln.build("conv2d", shapes, attrs=attrs, config={})
    tuned = kiln.build("conv2d", shapes, attrs=attrs, config=result.best["config"])
    arrays = random_inputs(default.shapes, default.dtypes)
    x, w = (torch.from_numpy(a) for a in arrays)
    sides = compare({"default": kernel_sampler(default, arrays), "tuned": kernel_sampler(tuned, arrays),
                     "torch": calls_sampler(lambda: torch.nn.functional.conv2d(x, w, stride=s, padding=p))}, repeat)
    _, amount = work(default.workload)
    gflops = {k: amount / v["median_s"] / 1e9 for k, v in sides.items()}
    return {"layer": layer_name(batch, layer), "tune_s": wall, "trials": len(result.trials),
            "config": result.best["config"], "gflops": gflops,
            "spread": {k: v.get("spread") for k, v in sides.items()},
            "default_ratio": gflops["default"] / gflops["torch"], "tuned_ratio": gflops["tuned"] / gflops["torch"]}


def spreads(spread: dict) -> str:
    """Interquartile range / median of each side, (noisy) when one is over 10%."""
    values = [spread[k] for k in ("default", "tuned", "torch")]
    text = " / ".join(f"{100 * v:.0f}%" for v in values)
    return text + (" (noisy)" if max(values) > NOISY_SPREAD else "")


def table(result: dict) -> str:
    lines = [f"FMA peak {result['fma_peak_gflops']:.0f} GFLOPS, {result['trials']} trials per layer (xgb), "
             f"GFLOPS; ratio = kiln / PyTorch (targets: default >= {DEFAULT_TARGET}, tuned >= {TUNED_TARGET})", "",
             "| layer | default | tuned | PyTorch | default ratio | tuned ratio | spread default / tuned / PyTorch "
             "| tuning s |",
             "|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        g = r["gflops"]
        flag = lambda v, t: f"{v:.2f}" if v >= t else f"**{v:.2f}**"  # noqa: E731 - below target in bold
        lines.append(f"| {r['layer']} | {g['default']:.1f} | {g['tuned']:.1f} | {g['torch']:.1f} | "
                     f"{flag(r['default_ratio'], DEFAULT_TARGET)} | {flag(r['tuned_ratio'], TUNED_TARGET)} | "
                     f"{spreads(r['spread'])} | {r['tune_s']:.0f} |")
    rows = result["rows"]
    lines += ["", f"below target: default {sum(r['default_ratio'] < DEFAULT_TARGET for r in rows)} of {len(rows)}, "
              f"tuned {sum(r['tuned_ratio'] < TUNED_TARGET for r in rows)} of {len(rows)}"]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--layers", default=",".join(str(i) for i in range(len(CONV_LAYERS))))
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--json", default=None)
    parser.add_argument("--summarize", action="store_true")
    args = parser.parse_args()
    if args.summarize:
        with open(args.json) as f:
            print(table(json.load(f)))
        return
    result = {"trials": args.trials, "fma_peak_gflops": fma_peak(), "rows": []}
    with tempfile.TemporaryDirectory() as folder:
        for batch in (int(b) for b in args.batches.split(",")):
            for i in (int(i) for i in args.layers.split(",")):
                row = run_layer(batch, CONV_LAYERS[i], args.trials, folder, args.repeat)
                print(f"{row['layer']}: default {row['default_ratio']:.2f} tuned {row['tuned_ratio']:.2f} "
                      f"({row['tune_s']:.0f} s)", flush=True)
                result["rows"].append(row)
                if args.json:  # after every layer: a run cut short keeps what it measured
                    write(args.json, result)
    print(table(result))


def write(path: str, result: dict) -> None:
    with atomic_path(path) as tmp, open(tmp, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
