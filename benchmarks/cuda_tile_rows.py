"""The CUDA conv template's ``tile_y`` (output rows per thread) swept on a GPU.

ResNet-18's 3x3 layers at batch 8, conv2d and its data gradient: for each,
the default config with ``tile_y`` 1, 2 and 4 (and 2 and 4 with 16 threads
over output channels), built in parallel first, then timed one after
another with TVM's time_evaluator; PyTorch (cuDNN, TF32 off, CUDA events)
in the same run. The sweep behind ``schedules/cuda/conv2d.py``'s
``_default_tile_y``.

Run on a machine with an NVIDIA GPU and PyTorch (CUDA build):
``python benchmarks/cuda_tile_rows.py``. Without a GPU it says so and exits
with status 0.
"""
from __future__ import annotations

import sys
import time
from multiprocessing import Pool

import numpy as np

ROWS = [("conv2d", 64, 56, 64, 1), ("conv2d", 128, 28, 128, 1), ("conv2d", 256, 14, 256, 1),
        ("conv2d", 512, 7, 512, 1), ("conv2d", 128, 28, 256, 2), ("conv2d", 256, 14, 512, 2),
        ("conv2d_backward_data", 128, 28, 128, 1), ("conv2d_backward_data", 256, 14, 256, 1),
        ("conv2d_backward_data", 512, 7, 512, 1), ("conv2d_backward_data", 256, 14, 512, 2)]
VARIANTS = [{"tile_y": 1}, {"tile_y": 2}, {"tile_y": 4}, {"tile_y": 4, "threads_oc": 16},
            {"tile_y": 2, "threads_oc": 16}]
BATCH = 8


def spec(row):
    """(shapes, attrs, flops) of one layer: (op, in channels, size, out channels, stride)."""
    op, c, h, o, s = row
    out = (h + 2 - 3) // s + 1
    flops = 2 * BATCH * o * out * out * c * 9
    if op == "conv2d":
        return [(BATCH, c, h, h), (o, c, 3, 3)], {"padding": 1, "stride": s}, flops
    return [(BATCH, o, out, out), (o, c, 3, 3)], {"in_size": (h, h), "padding": 1, "stride": s}, flops


def build(job):
    """Compile one (layer, variant) into kiln's kernel cache; its config, or None where the template refuses it."""
    import kiln
    from kiln.autotune import Space, Task

    row, variant = job
    shapes, attrs, _ = spec(row)
    space = Space(Task.create(row[0], shapes, None, attrs, kiln.cuda()))
    config = space.check(dict(space.default, **variant))
    if config is not None:
        kiln.build(row[0], shapes, attrs=attrs, target=kiln.cuda(), config=config)
    return config


def torch_seconds(row, inputs) -> float:
    """PyTorch's time for the layer (cuDNN), by ``cuda_suite.torch_ms``."""
    import torch

    from cuda_suite import torch_ms

    _, attrs, _ = spec(row)
    a, b = [torch.from_numpy(x).cuda() for x in inputs]
    if row[0] == "conv2d":
        return torch_ms(lambda: torch.nn.functional.conv2d(a, b, stride=attrs["stride"], padding=1)) / 1e3
    size = (BATCH, row[1], row[2], row[2])
    return torch_ms(lambda: torch.nn.grad.conv2d_input(size, b, a, stride=attrs["stride"], padding=1)) / 1e3


def main() -> int:
    import tvm

    if not tvm.cuda(0).exist:
        print("no CUDA device here: nothing measured (the script needs an NVIDIA GPU)")
        return 0
    import torch

    import kiln

    torch.backends.cudnn.allow_tf32 = False
    jobs = [(row, variant) for row in ROWS for variant in VARIANTS]
    start = time.time()
    with Pool() as pool:
        configs = pool.map(build, jobs)
    print(f"# {torch.cuda.get_device_name(0)}: {len(jobs)} configs built in {time.time() - start:.0f} s; TFLOPS")
    for (row, variant), config in zip(jobs, configs):
        shapes, attrs, flops = spec(row)
        inputs = [np.random.default_rng(0).standard_normal(s).astype("float32") for s in shapes]
        line = f"{row} {variant}: "
        if config is None:
            print(line + "refused by the template")
            continue
        kernel = kiln.build(row[0], shapes, attrs=attrs, target=kiln.cuda(), config=config)
        seconds = kernel.time(*inputs, number=10, repeat=5, min_repeat_ms=20)["median"]
        line += f"kiln {flops / seconds / 1e12:6.2f}"
        if variant == VARIANTS[0]:
            line += f"  PyTorch {flops / torch_seconds(row, inputs) / 1e12:6.2f}"
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
