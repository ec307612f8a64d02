"""From an op declaration to a scheduled TensorIR function.

``lower(op, shapes, dtypes, attrs, target, config)`` declares the op's tensor
expression on placeholders, checks that ``compute`` produced the shapes and
dtypes ``infer_shape``/``infer_dtype`` promised, makes a PrimFunc, and applies
the template that dispatch picks for (op, target) with the given knob values.
"""
from __future__ import annotations

from dataclasses import dataclass

import tvm
from tvm import te

from ..errors import BuildError, KilnError, ShapeError
from ..schedules import Config, lookup
from ..schedules.cuda.check import check_resources
from ..schedules.dispatch import template_name
from ..schedules.generic import schedule_empty
from ..te.shapes import same_dim, shape_str


@dataclass
class Lowered:
    sch: "tvm.s_tir.Schedule"
    cfg: Config
    template: str


def declare(op, shapes, dtypes, attrs, out_shapes, out_dtypes):
    """Placeholders and the op's output tensors, checked against its rules."""
    inputs = [te.placeholder(s, d, name=f"x{i}") for i, (s, d) in enumerate(zip(shapes, dtypes))]
    try:
        outs = op.compute(*inputs, **attrs)
    except KilnError:
        raise
    except Exception as exc:  # noqa: BLE001 - a TVM error while declaring is a bug to report clearly
        raise BuildError(f"compute failed: {type(exc).__name__}: {_first_line(exc)}", op=op.name) from exc
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    for i, (t, s, d) in enumerate(zip(outs, out_shapes, out_dtypes)):
        got = tuple(t.shape)
        if len(got) != len(s) or not all(same_dim(a, b) for a, b in zip(got, s)) or str(t.dtype) != d:
            raise ShapeError(f"compute made output {i} {shape_str(got)}:{t.dtype} but infer_shape/infer_dtype "
                             f"say {shape_str(s)}:{d}", op=op.name, arg="compute")
    return inputs, outs


def lower(op, shapes, dtypes, attrs, out_shapes, out_dtypes, target, config=None) -> Lowered:
    inputs, outs = declare(op, shapes, dtypes, attrs, out_shapes, out_dtypes)
    func = te.create_prim_func(inputs + outs)
    return schedule(op, func, outs[0].op.name, shapes, dtypes, attrs, target, config)


def schedule(op, func, out_block: str, shapes, dtypes, attrs, target, config=None) -> Lowered:
    """Apply the template dispatch picks for (op, target) to the PrimFunc of
    ``op`` (whose output block is ``out_block``), with the given knob values."""
    sch = tvm.s_tir.Schedule(func)
    cfg = Config(target, dict(config or {}),
                 workload={"op": op.name, "attrs": dict(attrs), "shapes": list(shapes), "dtypes": list(dtypes)})
    if _has_zero_dim(func):  # no element to compute: the declared loops are the whole kernel
        if target.kind == "cuda":
            raise ShapeError("got a zero-size dim, which CUDA kernels do not support (the CPU does)", op=op.name,
                             arg="shapes")
        schedule_empty(sch)
        return Lowered(sch, cfg, "generic.schedule_empty")
    template = lookup(op, target.kind)
    try:
        block = sch.get_sblock(out_block)
        template(sch, block, cfg)
    except KilnError:
        raise
    except Exception as exc:  # noqa: BLE001 - TVM's schedule errors are C++ tracebacks
        raise BuildError(f"template {template_name(template)} failed with config {cfg.values}: "
                         f"{_first_line(exc)}", op=op.name, arg="config") from exc
    cfg.check_known()
    if target.kind == "cuda":  # over the per-block limits: rejected here, before anything is compiled
        check_resources(sch.mod, target, op.name)
    return Lowered(sch, cfg, template_name(template))


def _has_zero_dim(func) -> bool:
    """Whether an input or output has a static zero-size dim (templates split
    and tile extents, which a zero cannot be)."""
    return any(isinstance(d, tvm.tirx.IntImm) and d.value == 0 for p in func.params for d in getattr(p, "shape", ()))


def compile_lowered(op, lowered: Lowered, target):
    try:
        return tvm.compile(lowered.sch.mod, target=target.tvm)
    except Exception as exc:  # noqa: BLE001
        raise BuildError(f"TVM could not compile the scheduled function: {_first_line(exc)}", op=op.name) from exc


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    # TVM errors end with the useful line; tracebacks come first.
    useful = [t for t in text if t.strip() and not t.startswith(("  ", "File", "Traceback"))]
    return (useful[-1] if useful else type(exc).__name__)[:500]
