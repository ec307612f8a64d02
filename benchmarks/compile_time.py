"""How long a compiled training step's first call takes, with the kernel cache cold and warm.

``kiln.compile`` of the train suite's ResNet-18 step (3x32x32, batch 32, SGD
with momentum 0.9; ``kiln.bench.suites.train``): the first call runs the step
eagerly once, recording it (every op's kernel compiled as it goes), then
compiles the recorded step into one module; later calls run the module. The
step is timed in a child process with ``KILN_CACHE_DIR`` set to a new empty
folder (cold: nothing compiled before), then in a second child on that same
folder (warm: every kernel and the step's module load from disk).

Run: ``python benchmarks/compile_time.py [--repeat N]`` (each of N rounds
takes a fresh folder; default 1).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

CHILD = """
import json, time
import numpy as np
from kiln import nn
import kiln
from kiln.bench.suites import train
nn.init.manual_seed(0)
model = train._resnet18_cifar().train()
rng = np.random.default_rng(0)
x = rng.random((32, 3, 32, 32), dtype=np.float32)
y = rng.integers(0, 10, 32).astype("int32")
opt = nn.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
loss = nn.SoftmaxLoss()
with model.kernel_pool.activate():
    step = kiln.compile(lambda a, b: loss(model(a), b), opt)
    start = time.perf_counter()
    step(x, y)
    first = time.perf_counter() - start
    start = time.perf_counter()
    step(x, y)
    second = time.perf_counter() - start
print(json.dumps({"first_s": first, "second_s": second}))
"""


def _run(cache: str) -> dict:
    env = {**os.environ, "KILN_CACHE_DIR": cache}
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=1, help="rounds, each on a fresh cache folder (default 1)")
    args = parser.parse_args()
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="kiln-compile-time-") as cache:
            cold, warm = _run(cache), _run(cache)
        print(f"ResNet-18 step, batch 32: first call {cold['first_s']:.1f} s with a cold cache "
              f"({warm['first_s']:.1f} s warm); a later call {cold['second_s']:.3f} s")


if __name__ == "__main__":
    main()
