"""Where a model of the models suite spends its call: ``Predictor.profile``
of its export, kernels of the same name and shapes summed.

The model is built, exported to ONNX and imported as ``kiln bench --suite
models`` does (``kiln.bench.suites.models``), exported by ``kiln.export``,
and profiled at one batch: each kernel timed alone on the arguments the call
gave it, and "(outside kernels)" the rest of a whole call (its Python and
the data that kernels timed alone find in cache and a call does not).

Run: ``python benchmarks/profile_model.py MODEL [--batch N] [--int8] [--top K]``,
MODEL one of the suite's names (``ResNet-50``, ``MobileNetV2``,
``BERT-base``...). Needs torch, onnx, onnxruntime and transformers.
"""
from __future__ import annotations

import argparse
import collections
import os
import tempfile
import time
import warnings

import kiln
from kiln.bench.suites import int8 as int8_suite
from kiln.bench.suites import models
from kiln.frontend import from_onnx
from kiln.runtime import Predictor


def profile(name: str, batch: int, folder: str, int8: bool = False):
    import torch
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy exporter's notices
        _, kind, size, vocab, path, example = models.write_onnx(name, False, folder)
    model = from_onnx(path)
    start = time.perf_counter()
    if int8:  # as the int8 suite quantizes it (bench/suites/int8.py)
        calibration = [models.inputs(kind, size, 4, vocab, seed=100 + k) for k in range(int8_suite.CALIBRATION)]
        model = kiln.quantize(model, [tuple(b.values()) for b in calibration])
    predictor = Predictor(kiln.export(model, example, os.path.join(folder, "model.so")))
    print(f"{name}: {'quantized and ' if int8 else ''}exported in {time.perf_counter() - start:.1f} s")
    return predictor.profile(**models.inputs(kind, size, batch, vocab), repeat=20)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", choices=list(models.MODELS))
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--int8", action="store_true", help="quantized by kiln.quantize as the int8 suite does")
    parser.add_argument("--top", type=int, default=20, help="kernels shown (default 20)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kiln-profile-") as folder:
        prof = profile(args.model, args.batch, folder, args.int8)
    summed = collections.defaultdict(lambda: [0, 0.0])
    for row in prof.rows:
        key = (row["kernel"], " ".join("x".join(map(str, s)) for s in row["shapes"][:2]))
        summed[key][0] += 1
        summed[key][1] += row["ms"]
    print(f"a call at batch {args.batch}: {prof.total_ms:.2f} ms")
    print(f"{'ms':>9} {'calls':>5}  kernel  (first two arguments' shapes)")
    for (kernel, shapes), (calls, ms) in sorted(summed.items(), key=lambda kv: -kv[1][1])[:args.top]:
        print(f"{ms:9.3f} {calls:5d}  {kernel}  ({shapes})")


if __name__ == "__main__":
    main()
