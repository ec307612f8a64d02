"""A model exported in float and after ``kiln.quantize``: output agreement
(cosine similarity, next-token argmax) and latency per call at batch 1 and 8,
timed interleaved.

Run: ``python benchmarks/int8_models.py [--d-model 256] [--layers 4]`` (a
``TransformerLM`` on 128 tokens, random weights, calibrated on 16 random
windows).
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    nn.init.manual_seed(0)
    model = TransformerLM(103, d_model=args.d_model, nhead=4, num_layers=args.layers, max_len=128, dropout=0.0)
    model.eval()
    rng = np.random.default_rng(0)
    calibration = [rng.integers(0, 103, (8, 128)).astype("int32") for _ in range(2)]
    quantized = kiln.quantize(model, calibration)
    print(quantized.summary())
    with tempfile.TemporaryDirectory() as tmp:
        pf = Predictor(kiln.export(model, calibration[0][:1], Path(tmp) / "f.so"))
        pq = Predictor(kiln.export(quantized, calibration[0][:1], Path(tmp) / "q.so"))
        x = rng.integers(0, 103, (8, 128)).astype("int32")
        a, b = pf(x), pq(x)
        cosine = float(a.ravel() @ b.ravel() / np.linalg.norm(a) / np.linalg.norm(b))
        print(f"cosine {cosine:.5f}, the same argmax at {np.mean(a.argmax(-1) == b.argmax(-1)):.1%} of positions")
        for batch in (1, 8):
            xb, times = x[:batch], {"float": [], "int8": []}
            for _ in range(args.rounds):
                for predictor, kind in ((pf, "float"), (pq, "int8")):
                    start = time.perf_counter()
                    for _ in range(20):
                        predictor(xb)
                    times[kind].append((time.perf_counter() - start) / 20 * 1e3)
            f, i = np.median(times["float"]), np.median(times["int8"])
            print(f"batch {batch}: float {f:.2f} ms, int8 {i:.2f} ms, float / int8 {f / i:.2f}")


if __name__ == "__main__":
    main()
