"""The CPU suite: kiln's default (untuned) kernels against references
measured in the same run.

- matmuls and the fused dense layer against numpy/OpenBLAS at full speed
  (the op's registered reference, in the reference process);
- ResNet-18's convolutions against PyTorch (oneDNN), warmed up at each shape,
  and their gradients (``conv2d_backward_data``, ``conv2d_backward_weight``)
  against ``torch.nn.grad.conv2d_input``/``conv2d_weight``;
- add and relu against the machine's triad bandwidth (a ceiling, from the header);
- softmax against PyTorch.
"""
from __future__ import annotations

from ...runtime import build
from ...runtime.measure import random_inputs, work
from ..rows import make_row
from ..timing import calls_sampler, compare, kernel_sampler

MATMULS = [((256, 256, 256), 0.95), ((1024, 1024, 1024), 0.95), ((2048, 2048, 2048), 0.95),
           ((1000, 1000, 1000), 0.8), ((129, 1000, 257), 0.8), ((128, 512, 10), 0.8)]
DENSE = ((128, 784, 512), 1.1)
CONV_LAYERS = [  # (C, H, O, K, stride, pad): ResNet-18's 3x3 layers, its three stride-2 3x3 layers, the first's
    # 1x1 shortcut, the stem
    (64, 56, 64, 3, 1, 1), (128, 28, 128, 3, 1, 1), (256, 14, 256, 3, 1, 1), (512, 7, 512, 3, 1, 1),
    (64, 56, 128, 3, 2, 1), (128, 28, 256, 3, 2, 1), (256, 14, 512, 3, 2, 1), (64, 56, 128, 1, 2, 0),
    (3, 224, 64, 7, 2, 3)]
CONV_BATCHES, CONV_TARGET, CONV_GRAD_TARGET = (1, 8), 1.0, 0.8  # forward: at least PyTorch with defaults
STREAM_ELEMENTS, STREAM_TARGET = 1 << 24, 0.8
SOFTMAX, SOFTMAX_TARGET = [(1024, 1024), (16384, 1024)], 1.0
# --quick: one row of each kind, small
FULL = {"matmuls": MATMULS, "dense": DENSE, "conv_layers": CONV_LAYERS, "conv_batches": CONV_BATCHES,
        "stream_elements": STREAM_ELEMENTS, "softmax": SOFTMAX}
QUICK = {"matmuls": [((256, 256, 256), 0.95)], "dense": ((64, 128, 64), 1.1), "conv_layers": [(64, 14, 64, 3, 1, 1)],
         "conv_batches": (1,), "stream_elements": 1 << 20, "softmax": [(256, 1024)]}


def _kernel(op, shapes, attrs=None):
    kernel = build(op, shapes, attrs=attrs)
    return kernel, random_inputs(kernel.shapes, kernel.dtypes)


def _numpy_row(name, op, shapes, attrs, ref, repeat, target, reference="numpy", extra=None):
    kernel, arrays = _kernel(op, shapes, attrs)
    ref.prepare(kernel.workload)
    sides = compare({"kiln": kernel_sampler(kernel, arrays), "ref": ref.sample}, repeat)
    unit, amount = work(kernel.workload)
    return make_row(name, unit, sides["kiln"], reference, sides["ref"], target, amount, extra=extra)


def _torch_row(name, op, shapes, attrs, torch_fn, torch, repeat, target):
    """kiln's kernel against ``torch_fn(*tensors)`` on the same inputs (kiln's figure alone without torch)."""
    kernel, arrays = _kernel(op, shapes, attrs)
    unit, amount = work(kernel.workload)
    samplers = {"kiln": kernel_sampler(kernel, arrays)}
    if torch is not None:
        tensors = [torch.from_numpy(a) for a in arrays]
        samplers["ref"] = calls_sampler(lambda: torch_fn(*tensors))
    sides = compare(samplers, repeat)
    return make_row(name, unit, sides["kiln"], "PyTorch", sides.get("ref"), target, amount,
                    note=None if torch is not None else "PyTorch is not installed: no ratio")


def _conv_grad_rows(batch: int, layer: tuple, torch, repeat: int) -> list[dict]:
    """The layer's data and weight gradients against PyTorch's (``torch.nn.grad``)."""
    c, h, o, k, s, p = layer
    oh = (h + 2 * p - k) // s + 1
    grad = torch.nn.grad if torch is not None else None
    name = f"b{batch} {c}x{h}x{h}->{o} k{k} s{s}"
    return [
        _torch_row(f"conv2d_backward_data {name}", "conv2d_backward_data", [(batch, o, oh, oh), (o, c, k, k)],
                   {"in_size": h, "stride": s, "padding": p},
                   lambda gy, w: grad.conv2d_input((batch, c, h, h), w, gy, stride=s, padding=p), torch, repeat,
                   CONV_GRAD_TARGET),
        _torch_row(f"conv2d_backward_weight {name}", "conv2d_backward_weight", [(batch, c, h, h), (batch, o, oh, oh)],
                   {"kernel": k, "stride": s, "padding": p},
                   lambda x, gy: grad.conv2d_weight(x, (o, c, k, k), gy, stride=s, padding=p), torch, repeat,
                   CONV_GRAD_TARGET)]


def run(context, repeat: int, quick: bool = False) -> list[dict]:
    """The suite's rows (``context``: a ``kiln.bench.suites.Context``)."""
    ref, torch, header = context.ref, context.torch, context.header
    q = QUICK if quick else FULL
    rows = []
    for (m, k, n), target in q["matmuls"]:
        row = _numpy_row(f"matmul {m}x{k}x{n}", "matmul", [(m, k), (k, n)], None, ref, repeat, target)
        row["extra"]["kiln % of FMA peak"] = 100 * row["kiln"] / header["fma_peak_gflops"]
        rows.append(row)
    (m, k, n), target = q["dense"]
    rows.append(_numpy_row(f"dense+bias+relu {m}x{k}->{n}", "dense", [(m, k), (k, n), (n,)], {"relu": True}, ref,
                           repeat, target, "numpy (matmul + add + maximum)"))
    conv = torch.nn.functional.conv2d if torch is not None else None
    for batch in q["conv_batches"]:
        for c, h, o, k, s, p in q["conv_layers"]:
            rows.append(_torch_row(f"conv2d b{batch} {c}x{h}x{h}->{o} k{k} s{s}", "conv2d",
                                   [(batch, c, h, h), (o, c, k, k)], {"stride": s, "padding": p},
                                   lambda x, w, s=s, p=p: conv(x, w, stride=s, padding=p), torch, repeat,
                                   CONV_TARGET))
            rows += _conv_grad_rows(batch, (c, h, o, k, s, p), torch, repeat)
    n = q["stream_elements"]
    triad = {"figure": header["triad_gbps"]}
    for op in ("add", "relu"):
        shapes = [(n,)] * (2 if op == "add" else 1)
        kernel, arrays = _kernel(op, shapes)
        unit, amount = work(kernel.workload)
        kiln_side = compare({"kiln": kernel_sampler(kernel, arrays)}, repeat)["kiln"]
        rows.append(make_row(f"{op} over {n / (1 << 20):g}M floats", unit, kiln_side, "triad (header)", triad,
                             STREAM_TARGET, amount))
    for shape in q["softmax"]:
        rows.append(_torch_row(f"softmax {shape[0]}x{shape[1]}", "softmax", [shape], None,
                               lambda x: torch.softmax(x, -1), torch, repeat, SOFTMAX_TARGET))
    return rows
