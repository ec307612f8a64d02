"""One training step on kiln's compiled kernels against PyTorch CPU eager, in
the same run, plus exported-predictor latency against PyTorch inference.

Run: ``python benchmarks/train_step.py [--json] [--steps N]``. PyTorch is an
optional reference: without it kiln's figures are reported and the ratios
skipped. Both sides use the same thread count.
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time

import numpy as np
import tvm

import kiln
from kiln import nn
from kiln.runtime import Predictor


def _median_ms(fn, steps: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times)) * 1e3


def _kiln_models():
    nn.init.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 10))
    cnn = nn.Sequential(nn.Conv(1, 16, 3), nn.ReLU(), nn.Conv(16, 32, 3), nn.ReLU(), nn.GlobalAvgPool2d(),
                        nn.Linear(32, 10))
    return mlp, cnn


def _torch_models(torch):
    tnn = torch.nn
    mlp = tnn.Sequential(tnn.Linear(784, 512), tnn.ReLU(), tnn.Linear(512, 10))
    cnn = tnn.Sequential(tnn.Conv2d(1, 16, 3, padding=1), tnn.ReLU(), tnn.Conv2d(16, 32, 3, padding=1), tnn.ReLU(),
                         tnn.AdaptiveAvgPool2d(1), tnn.Flatten(), tnn.Linear(32, 10))
    return mlp, cnn


def kiln_step(model, x, y):
    opt = kiln.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.SoftmaxLoss()
    xt, yt = kiln.Tensor(x), kiln.Tensor(y)

    def step():
        opt.zero_grad()
        loss_fn(model(xt), yt).backward()
        opt.step()

    return step


def torch_step(torch, model, x, y):
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y.astype("int64"))

    def step():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(xt), yt).backward()
        opt.step()

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--steps", type=int, default=50)
    args = parser.parse_args()
    try:
        import torch

        torch.set_num_threads(tvm.runtime.num_threads())
    except ImportError:
        torch = None
    rng = np.random.default_rng(0)
    cases = {"mlp 784-512-10, batch 128": (rng.random((128, 784), dtype=np.float32), 0),
             "cnn 1x28x28 conv16-conv32-pool-linear, batch 64": (rng.random((64, 1, 28, 28), dtype=np.float32), 1)}
    kiln_models = _kiln_models()
    torch_models = _torch_models(torch) if torch else (None, None)
    rows = []
    for name, (x, k) in cases.items():
        y = rng.integers(0, 10, len(x)).astype("int32")
        row = {"workload": f"train step: {name}", "kiln_ms": _median_ms(kiln_step(kiln_models[k], x, y), args.steps)}
        if torch:
            row["torch_ms"] = _median_ms(torch_step(torch, torch_models[k], x, y), args.steps)
            row["ratio"] = row["kiln_ms"] / row["torch_ms"]
        rows.append(row)
    mlp = kiln_models[0]
    with tempfile.TemporaryDirectory() as tmp:
        predictor = Predictor(kiln.export(mlp, np.zeros((1, 784), "float32"), f"{tmp}/mlp.so"))
        for batch in (1, 64):
            x = rng.random((batch, 784), dtype=np.float32)
            row = {"workload": f"exported mlp inference, batch {batch}", "kiln_ms": _median_ms(lambda: predictor(x),
                                                                                                args.steps * 4)}
            if torch:
                tmodel, xt = torch_models[0].eval(), torch.from_numpy(x)
                with torch.no_grad():
                    row["torch_ms"] = _median_ms(lambda: tmodel(xt), args.steps * 4)
                row["ratio"] = row["kiln_ms"] / row["torch_ms"]
            rows.append(row)
    result = {"cpu": kiln.cpu().mcpu, "threads": tvm.runtime.num_threads(),
              "torch": torch.__version__ if torch else None, "rows": rows}
    if args.json:
        print(json.dumps(result))
        return
    print(f"cpu {result['cpu']}, {result['threads']} threads, PyTorch {result['torch'] or 'absent: ratios skipped'}")
    print(f"{'workload':<52} {'kiln ms':>9} {'torch ms':>9} {'kiln/torch':>10}")
    for r in rows:
        torch_ms = f"{r['torch_ms']:9.3f}" if "torch_ms" in r else f"{'-':>9}"
        ratio = f"{r['ratio']:10.2f}" if "ratio" in r else f"{'-':>10}"
        print(f"{r['workload']:<52} {r['kiln_ms']:9.3f} {torch_ms} {ratio}")


if __name__ == "__main__":
    main()
