"""Eager training steps with the dependency engine against a serial engine,
interleaved in one process (the host's noise hits both sides alike).

For the 784-512-10 MLP (batch 128), the zoo CNN and the zoo ResNet (1x8x8,
batch 64), with SGD momentum: the process's engine (``Engine()``, its
workers) and a serial one (``Engine(0)``, every push inline, as
``KILN_ENGINE=serial``) take turns as ``kiln.runtime.engine``'s default,
``--rounds`` rounds of ``--steps`` synchronized steps each (every step ends
with ``wait_for_all`` and reading the loss). Prints the median step time of
each side and the ratio: at or below 1.0 the engine pays for itself.

Run: ``python benchmarks/engine_vs_serial.py [--rounds 7] [--steps 20]``.
"""
from __future__ import annotations

import argparse
import time

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()

    import kiln
    from kiln import nn
    from kiln.nn.zoo import build_model
    from kiln.runtime import engine

    rng = np.random.default_rng(0)
    sides = {"engine": engine.default(), "serial": engine.Engine(0)}
    models = {"MLP 784-512-10 b128": (lambda: nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 10)),
                                      (128, 784)),
              "zoo cnn 1x8x8 b64": (lambda: build_model("cnn", (1, 8, 8), 10), (64, 1, 8, 8)),
              "zoo resnet 1x8x8 b64": (lambda: build_model("resnet", (1, 8, 8), 10), (64, 1, 8, 8))}
    for name, (make, shape) in models.items():
        kiln.manual_seed(0)
        model = make()
        opt = kiln.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        loss_fn = nn.SoftmaxLoss()
        x = kiln.Tensor(rng.random(shape, dtype=np.float32))
        y = kiln.Tensor(rng.integers(0, 10, shape[0]).astype("int32"))

        def step():
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            engine.default().wait_for_all()
            loss.numpy()

        times = {side: [] for side in sides}
        try:
            for _ in range(6):  # compile every kernel of the step before timing
                step()
            for _ in range(args.rounds):
                for side, eng in sides.items():
                    engine._default = eng
                    for _ in range(3):
                        step()
                    start = time.perf_counter()
                    for _ in range(args.steps):
                        step()
                    times[side].append((time.perf_counter() - start) / args.steps * 1e3)
        finally:
            engine._default = sides["engine"]
        a, b = (float(np.median(times[s])) for s in ("engine", "serial"))
        print(f"{name:24s} engine {a:7.3f} ms   serial {b:7.3f} ms   engine / serial {a / b:.3f}")


if __name__ == "__main__":
    main()
