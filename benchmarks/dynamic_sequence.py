"""A transformer LM exported once with a dynamic sequence length against
modules exported for one length each: latency per call at each length and
batch, timed interleaved, and the largest output difference.

Run: ``python benchmarks/dynamic_sequence.py [--lengths 32,64,128] [--batches 1,8]``
(the 2 x 128 transformer LM of ``kiln train --dataset text``, max_len 128).
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

import kiln
from kiln import nn
from kiln.nn.language_model import TransformerLM
from kiln.runtime import Predictor


def _ms(call, x, repeat: int) -> float:
    start = time.perf_counter()
    for _ in range(repeat):
        call(x)
    return (time.perf_counter() - start) / repeat * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="32,64,128")
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    lengths, batches = [int(v) for v in args.lengths.split(",")], [int(v) for v in args.batches.split(",")]
    nn.init.manual_seed(0)
    model = TransformerLM(103, max_len=max(lengths), dropout=0.0).eval()
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        dynamic = Predictor(kiln.export(model, np.zeros((1, lengths[0]), "int32"), Path(tmp) / "dyn.so",
                                        dynamic_seq=True))
        print(f"dynamic export {time.perf_counter() - start:.1f} s (max_seq {dynamic.max_seq})")
        fixed = {n: Predictor(kiln.export(model, np.zeros((1, n), "int32"), Path(tmp) / f"l{n}.so")) for n in lengths}
        print("| length | batch | dynamic ms | fixed-length ms | dynamic / fixed | max difference |")
        print("|---|---|---|---|---|---|")
        rng = np.random.default_rng(0)
        for n in lengths:
            for b in batches:
                x = rng.integers(0, 103, (b, n)).astype("int32")
                diff = float(np.abs(dynamic(x) - fixed[n](x)).max())
                repeat = max(3, int(200 / (b * n / 32)))
                times = {"dyn": [], "fix": []}
                for _ in range(args.rounds):
                    times["dyn"].append(_ms(dynamic, x, repeat))
                    times["fix"].append(_ms(fixed[n], x, repeat))
                d, f = np.median(times["dyn"]), np.median(times["fix"])
                print(f"| {n} | {b} | {d:.3f} | {f:.3f} | {d / f:.2f} | {diff:.1e} |")


if __name__ == "__main__":
    main()
