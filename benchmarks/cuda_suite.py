"""kiln's CUDA templates on a GPU against PyTorch (cuBLAS, cuDNN) in one run.

Rows: matmul 4096^3 fp32, the 3x3 convolutions of ResNet-18 (batch 1 and
8) and their data and weight gradients at batch 8 (against
``torch.nn.grad.conv2d_input`` / ``conv2d_weight``, cuDNN's), each checked
against numpy on the device first, then timed (kiln: TVM's
time_evaluator; PyTorch: CUDA events) with TF32 off on both sides, so
cuBLAS runs plain SGEMM. ``--tune N`` first tunes the matmul with kiln's tuner
(``--tuner``, default xgb) for N trials on this GPU and adds a row for the
tuned config.

Goals: >= 0.7x cuBLAS SGEMM with the default config, >= 0.9x after tuning.

Run on a machine with an NVIDIA GPU and PyTorch (CUDA build):
``python benchmarks/cuda_suite.py [--arch sm_80|sm_90] [--tune 64 [--tuner random]] [--rows backward]
[--json FILE]``.
Without a GPU it says so and exits with status 0.
"""
from __future__ import annotations

import argparse
import json
import sys

import numpy as np
import tvm

import kiln

CONVS = [(64, 56, 64, 1), (128, 28, 128, 1), (256, 14, 256, 1), (512, 7, 512, 1), (64, 56, 128, 2),
         (128, 28, 256, 2), (256, 14, 512, 2)]  # (in channels, size, out channels, stride), 3x3, padding 1


def torch_ms(fn, repeat: int = 50) -> float:
    import torch

    for _ in range(5):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(repeat):
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return float(np.median(times))


def kiln_row(name, op, shapes, attrs, flops, reference, torch_fn, target, config=None) -> dict:
    kernel = kiln.build(op, shapes, attrs=attrs, target=target, config=config)
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(s).astype("float32") for s in shapes]
    got = kernel(*inputs)
    np.testing.assert_allclose(got, reference(*inputs), rtol=1e-3, atol=1e-3)  # numerics on the device
    seconds = kernel.time(*inputs, number=10, repeat=10, min_repeat_ms=100)["median"]
    theirs = torch_ms(lambda: torch_fn(*inputs)) / 1e3
    row = {"workload": name, "kiln_gflops": flops / seconds / 1e9, "torch_gflops": flops / theirs / 1e9,
           "ratio": theirs / seconds, "config": kernel.resolved_config()}
    print(f"{name:48s} kiln {row['kiln_gflops']:8.1f} GFLOPS  PyTorch {row['torch_gflops']:8.1f}  "
          f"ratio {row['ratio']:.2f}", flush=True)
    return row


def forward_rows(args, on, target) -> list[dict]:
    """matmul 4096^3 (default, and tuned with ``--tune``) and the forward 3x3 convolutions at batch 1 and 8."""
    import torch

    rows = []
    n = 4096
    mm_shapes = [(n, n), (n, n)]
    a, b = on(*[np.zeros(s, "float32") for s in mm_shapes])
    mm_torch = lambda *_: torch.matmul(a, b)  # noqa: E731
    rows.append(kiln_row("matmul 4096^3 (default config)", "matmul", mm_shapes, {}, 2 * n ** 3, np.matmul, mm_torch,
                         target))
    if args.tune:
        from kiln.autotune import Task, tune

        result = tune(Task.create("matmul", mm_shapes, target=target), trials=args.tune, tuner=args.tuner)
        rows.append(kiln_row(f"matmul 4096^3 ({args.tuner}, {args.tune} trials)", "matmul", mm_shapes, {}, 2 * n ** 3,
                             np.matmul, mm_torch, target, config=result.best["config"]))
    for batch in (1, 8):
        for c, size, o, stride in CONVS:
            shapes = [(batch, c, size, size), (o, c, 3, 3)]
            x, w = on(*[np.zeros(s, "float32") for s in shapes])
            out = (size + 2 - 3) // stride + 1
            flops = 2 * batch * o * out * out * c * 9
            ref = lambda xx, ww, s=stride: torch.nn.functional.conv2d(  # noqa: E731
                torch.from_numpy(xx), torch.from_numpy(ww), stride=s, padding=1).numpy()
            rows.append(kiln_row(f"conv2d b{batch} {c}x{size}x{size}->{o} s{stride}", "conv2d", shapes,
                                 {"padding": 1, "stride": stride}, flops, ref,
                                 lambda *_, s=stride: torch.nn.functional.conv2d(x, w, stride=s, padding=1), target))
    return rows


def grad_rows(batch, c, size, o, stride, on, target) -> list[dict]:
    """conv2d_backward_data and conv2d_backward_weight of one 3x3 layer (padding 1)."""
    import torch

    out = (size + 2 - 3) // stride + 1
    flops = 2 * batch * o * out * out * c * 9
    x_shape, w_shape, gy_shape = (batch, c, size, size), (o, c, 3, 3), (batch, o, out, out)
    x, w, gy = on(*[np.zeros(s, "float32") for s in (x_shape, w_shape, gy_shape)])
    grad = torch.nn.grad
    data_ref = lambda g, ww: grad.conv2d_input(x_shape, torch.from_numpy(ww), torch.from_numpy(g),  # noqa: E731
                                               stride=stride, padding=1).numpy()
    weight_ref = lambda xx, g: grad.conv2d_weight(torch.from_numpy(xx), w_shape, torch.from_numpy(g),  # noqa: E731
                                                  stride=stride, padding=1).numpy()
    layer = f"b{batch} {c}x{size}x{size}->{o} s{stride}"
    return [
        kiln_row(f"conv2d_backward_data {layer}", "conv2d_backward_data", [gy_shape, w_shape],
                 {"in_size": (size, size), "padding": 1, "stride": stride}, flops, data_ref,
                 lambda *_: grad.conv2d_input(x_shape, w, gy, stride=stride, padding=1), target),
        kiln_row(f"conv2d_backward_weight {layer}", "conv2d_backward_weight", [x_shape, gy_shape],
                 {"kernel": 3, "padding": 1, "stride": stride}, flops, weight_ref,
                 lambda *_: grad.conv2d_weight(x, w_shape, gy, stride=stride, padding=1), target),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default=None, help="sm_80 or sm_90 (default: the GPU's)")
    parser.add_argument("--tune", type=int, default=0, help="tune the matmul for this many trials first")
    parser.add_argument("--tuner", default="xgb", help="xgb (default), random or grid")
    parser.add_argument("--rows", choices=("all", "forward", "backward"), default="all",
                        help="forward: matmul and conv2d; backward: the conv gradients (default: all)")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    if not tvm.cuda(0).exist:
        print("no CUDA device here: nothing measured (the script needs an NVIDIA GPU)")
        return 0
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    target = kiln.cuda(args.arch)
    dev = torch.device("cuda")
    name = torch.cuda.get_device_name(0)
    print(f"# {name}, target {target}, TF32 off", flush=True)
    on = lambda *xs: [torch.from_numpy(x).to(dev) for x in xs]  # noqa: E731

    rows = forward_rows(args, on, target) if args.rows != "backward" else []
    for c, size, o, stride in CONVS if args.rows != "forward" else ():
        rows += grad_rows(8, c, size, o, stride, on, target)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": name, "target": str(target), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
