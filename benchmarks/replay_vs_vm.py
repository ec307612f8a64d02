"""Exported zoo models called through a ``Predictor`` (recorded calls
replayed: ``runtime/replay.py``) against the same module's VM function
called the way a Predictor called it before (the input through DLPack, the
VM's instructions, the output through DLPack), interleaved in one process.

Rows: model and batch, microseconds per call both ways, the ratio, and the
replay's kernel count. ``--json`` prints the rows as one JSON object.

Run: ``python benchmarks/replay_vs_vm.py [--models mlp,cnn,resnet]
[--batches 1,16,64] [--repeat 10] [--json]``
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np


def rows(models: list[str], batches: list[int], repeat: int) -> list[dict]:
    import kiln
    from kiln.bench.timing import calls_sampler, compare
    from kiln.nn.train import build_model
    from kiln.runtime.predictor import Predictor, choose_entry

    out = []
    with tempfile.TemporaryDirectory(prefix="kiln-replay-") as folder:
        for name in models:
            model = build_model(name, (1, 8, 8), 10)
            model.eval()
            predictor = Predictor(kiln.export(model, np.zeros((1, 1, 8, 8), "float32"), Path(folder) / f"{name}.so"))
            for batch in batches:
                x = np.random.default_rng(0).standard_normal((batch, 1, 8, 8)).astype("float32")
                vm = predictor._funcs[choose_entry(predictor._entries, batch)]

                def through_vm(x=x, vm=vm):
                    predictor._check(x)  # what a call did before it was replayed
                    return np.from_dlpack(vm(predictor._argument(x)))

                np.testing.assert_array_equal(predictor(x), through_vm())  # records; then both give the same
                plan = predictor._plans[batch]
                result = compare({"replay": calls_sampler(lambda x=x: predictor(x)),
                                  "vm": calls_sampler(through_vm)}, repeat)
                replay_us, vm_us = (1e6 * result[k]["median_s"] for k in ("replay", "vm"))
                out.append({"model": name, "batch": batch, "replay_us": replay_us, "vm_us": vm_us,
                            "ratio": replay_us / vm_us, "kernels": len(plan._steps) if plan else None,
                            "noisy": result["replay"]["noisy"] or result["vm"]["noisy"]})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="mlp,cnn,resnet")
    parser.add_argument("--batches", default="1,16,64")
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from kiln.errors import KilnError
    from kiln.nn.zoo import MODELS

    try:
        models = [m for m in args.models.split(",") if m]
        unknown = [m for m in models if m not in MODELS]
        if unknown or not models:
            raise KilnError(f"got --models {args.models!r}, expected some of {', '.join(MODELS)}")
        batches = [int(b) for b in args.batches.split(",") if b]
        if not batches or min(batches) < 1:
            raise ValueError
    except ValueError:
        parser.error(f"got --batches {args.batches!r}, expected positive whole numbers separated by commas")
    except KilnError as exc:
        parser.error(str(exc))
    if args.repeat < 1:
        parser.error(f"got --repeat {args.repeat}, expected a positive number")
    found = rows(models, batches, args.repeat)
    if args.json:
        print(json.dumps({"rows": found}))
        return
    print(f"{'model':<8} {'batch':>5} {'replay us':>10} {'VM us':>10} {'ratio':>6} {'kernels':>7}")
    for r in found:
        print(f"{r['model']:<8} {r['batch']:>5} {r['replay_us']:>10.2f} {r['vm_us']:>10.2f} {r['ratio']:>6.2f} "
              f"{r['kernels'] if r['kernels'] is not None else '-':>7}{'  noisy' if r['noisy'] else ''}")


if __name__ == "__main__":
    sys.exit(main())
