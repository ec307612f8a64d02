"""An exported model's latency beside a busy process, against ONNX Runtime's.

Exports the zoo CNN (8x8 digits), runs its PyTorch twin (the same
weights) in ONNX Runtime (kiln's threads, one inter-op thread), and times
both at ``--batch`` three ways: alone, beside a ``nice 19`` busy loop, beside a busy loop at normal
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
from kiln.bench.twins import ort_session, torch_twin
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    folder = tempfile.mkdtemp()
    model = build_model("cnn", (1, 8, 8), 10).eval()
    predictor = kiln.runtime.Predictor(kiln.export(model, np.zeros((1, 1, 8, 8), "float32"),
                                                   os.path.join(folder, "cnn.so")))
    session, reason = ort_session(torch_twin(model).eval(), (1, 8, 8), folder, kiln.config.num_threads())
    if session is None:
        sys.exit(f"contention.py: {reason}")
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
