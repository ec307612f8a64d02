"""An exported model's latency beside a busy process, against ONNX Runtime's.

Exports the zoo CNN (8x8 digits), builds the same network in ONNX Runtime
(kiln's threads, one inter-op thread), and times both at ``--batch`` three
ways: alone, beside a ``nice 19`` busy loop, beside a busy loop at normal
priority (a second Python process spinning, started before and stopped
after each pair of timings). Run it once as is and once with
``TVM_BIND_THREADS=0`` to see what pinning TVM's threads costs and saves.

Run: ``python benchmarks/contention.py [--batch 16]`` (needs torch, onnx and
onnxruntime).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

import kiln
from kiln.nn.train import build_model

LOADS = {"alone": None, "nice 19 busy loop": ["nice", "-n", "19"], "busy loop": []}


def median_ms(fn, calls: int) -> float:
    for _ in range(20):
        fn()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times)) * 1e3


def onnx_session(folder: str, threads: int):
    import onnxruntime as ort
    import torch

    t = torch.nn
    model = t.Sequential(t.Conv2d(1, 16, 3, padding=1), t.BatchNorm2d(16), t.ReLU(), t.Conv2d(16, 32, 3, padding=1),
                         t.BatchNorm2d(32), t.ReLU(), t.AdaptiveAvgPool2d(1), t.Flatten(), t.Linear(32, 10)).eval()
    path = os.path.join(folder, "cnn.onnx")
    torch.onnx.export(model, torch.zeros(1, 1, 8, 8), path, input_names=["x"], dynamic_axes={"x": {0: "n"}},
                      dynamo=False)
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    folder = tempfile.mkdtemp()
    model = build_model("cnn", (1, 8, 8), 10).eval()
    predictor = kiln.runtime.Predictor(kiln.export(model, np.zeros((1, 1, 8, 8), "float32"),
                                                   os.path.join(folder, "cnn.so")))
    session = onnx_session(folder, kiln.config.num_threads())
    x = np.random.default_rng(0).random((args.batch, 1, 8, 8), dtype=np.float32)
    print(f"# {kiln.cpu()}  threads={kiln.config.num_threads()}  TVM_BIND_THREADS="
          f"{os.environ.get('TVM_BIND_THREADS', '(unset)')}  zoo cnn, batch {args.batch}")
    for name, prefix in LOADS.items():
        busy = None if prefix is None else subprocess.Popen(prefix + [sys.executable, "-c", "while True: pass"])
        try:
            time.sleep(0.5 if busy else 0)
            ours = median_ms(lambda: predictor(x), args.calls)
            theirs = median_ms(lambda: session.run(None, {"x": x}), args.calls)
        finally:
            if busy:
                busy.kill()
                busy.wait()
        print(f"{name:18s} kiln {ours:8.4f} ms   ONNX Runtime {theirs:8.4f} ms   kiln / ORT {ours / theirs:6.2f}")


if __name__ == "__main__":
    main()
