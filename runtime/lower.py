"""From an op declaration to a scheduled TensorIR function.

``lower(workload, target, config)`` declares the op's tensor expression on
placeholders, checks that ``compute`` produced the shapes and dtypes
``infer_shape``/``infer_dtype`` promised (``workload.out_shapes``), makes a
PrimFunc, and applies the template that dispatch picks for (op, target) with
the given knob values.
"""
from __future__ import annotations

from dataclasses import dataclass

import tvm
from tvm import te

from ..errors import BuildError, KilnError, ShapeError, tvm_message
from ..schedules import Config, apply
from ..schedules.cuda.check import check_resources
from ..schedules.generic import schedule_empty
from ..te.shapes import same_dim, shape_str
from ..te.workload import Workload


@dataclass
class Lowered:
    sch: "tvm.s_tir.Schedule"
    cfg: Config
    template: str


def declare(workload: Workload):
    """Placeholders and the op's output tensors, checked against its rules."""
    op = workload.op
    shapes = workload.shapes
    if past_int32(workload):  # every index in int64: TVM types a static dim below 2**31 as int32
        shapes = [tuple(tvm.tirx.IntImm("int64", d) if isinstance(d, int) else d for d in s) for s in shapes]
    inputs = [te.placeholder(s, d, name=f"x{i}") for i, (s, d) in enumerate(zip(shapes, workload.dtypes))]
    try:
        outs = op.compute(*inputs, **workload.attrs)
    except KilnError:
        raise
    except Exception as exc:  # noqa: BLE001 - a TVM error while declaring is a bug to report clearly
        raise BuildError(f"compute failed: {type(exc).__name__}: {tvm_message(exc)}", op=op.name) from exc
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    for i, (t, s, d) in enumerate(zip(outs, workload.out_shapes, workload.out_dtypes)):
        got = tuple(t.shape)
        if len(got) != len(s) or not all(same_dim(a, b) for a, b in zip(got, s)) or str(t.dtype) != d:
            raise ShapeError(f"compute made output {i} {shape_str(got)}:{t.dtype} but infer_shape/infer_dtype "
                             f"say {shape_str(s)}:{d}", op=op.name, arg="compute")
    return inputs, outs


#: the most elements a tensor indexed with int32 may have
INT32_ELEMENTS = 2**31 - 1


def past_int32(workload: Workload) -> bool:
    """Whether a tensor of the workload has more elements than an int32 index
    reaches: then its kernel is declared with int64 dims, and one that TVM
    cannot build so is a ShapeError naming the shapes (``build_workload``;
    TVM 0.27 cannot ``fuse`` loops past int32, nor compile some ops' int32
    loops: the generic injective template, the data-dependent ops)."""
    for shape in (*workload.shapes, *workload.out_shapes):
        total = 1
        for d in shape:
            total *= d if isinstance(d, int) else 1
        if total > INT32_ELEMENTS:
            return True
    return False


def lower(workload: Workload, target, config=None) -> Lowered:
    """The scheduled TensorIR of ``workload`` on ``target`` with the knob values ``config``."""
    inputs, outs = declare(workload)
    func = te.create_prim_func(inputs + outs)
    return schedule(workload, func, outs[0].op.name, target, config)


def schedule(workload: Workload, func, out_block: str, target, config=None) -> Lowered:
    """Apply the template dispatch picks for (op, target) to the PrimFunc of
    ``workload`` (whose output block is ``out_block``), with the given knob values."""
    op = workload.op
    sch = tvm.s_tir.Schedule(func)
    cfg = Config(target, dict(config or {}), workload=workload)
    if _has_zero_dim(func):  # no element to compute: the declared loops are the whole kernel
        if target.kind == "cuda":
            raise ShapeError("got a zero-size dim, which CUDA kernels do not support (the CPU does)", op=op.name,
                             arg="shapes")
        schedule_empty(sch)
        return Lowered(sch, cfg, "generic.schedule_empty")
    template = apply(op, target.kind, sch, sch.get_sblock(out_block), cfg)  # the first that accepts
    cfg.check_known()
    if target.kind == "cuda":  # over the per-block limits: rejected here, before anything is compiled
        check_resources(sch.mod, target, op.name)
    return Lowered(sch, cfg, template)


def _has_zero_dim(func) -> bool:
    """Whether an input or output has a static zero-size dim (templates split
    and tile extents, which a zero cannot be)."""
    return any(isinstance(d, tvm.tirx.IntImm) and d.value == 0 for p in func.params for d in getattr(p, "shape", ()))


def compile_lowered(workload: Workload, lowered: Lowered, target):
    try:
        return tvm.compile(lowered.sch.mod, target=target.tvm)
    except Exception as exc:  # noqa: BLE001
        raise BuildError(f"TVM could not compile the scheduled function: {tvm_message(exc)}",
                         op=workload.op.name) from exc
