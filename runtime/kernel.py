"""A compiled op: call it on numpy arrays or device tensors, read its schedule
and source, time it."""
from __future__ import annotations

from functools import cached_property

import numpy as np
import tvm

from ..errors import DTypeError, KernelRuntimeError, ShapeError, TargetError, tvm_message
from ..te.shapes import is_static, shape_str, size, static, upper_bounds
from .device import check_runs_here
from .lower import compile_lowered


def actual_rows(storage, length):
    """The first ``length[0]`` rows of a data-dependent op's storage (a view, no copy)."""
    rows = int(length.numpy()[0])
    return storage._create_view((rows,) + tuple(int(d) for d in storage.shape[1:]))


def _module_source(module, target) -> str:
    mods = [module] + list(module.imports)
    if target.kind == "cuda":  # the device code, not the host launcher
        mods = [m for m in mods if m.kind == "cuda"] + mods
    for m in mods:
        try:
            text = m.inspect_source()
        except Exception:  # noqa: BLE001 - a module kind with no source
            continue
        if text:
            return text
    return ""


class Kernel:
    """One workload compiled for one target with one config.

    ``op``, ``attrs``, ``shapes``, ``dtypes`` and ``out_dtypes`` are the
    workload's (``kernel.workload``)."""

    def __init__(self, workload, target, config, module, relower):
        self.workload = workload
        self.target = target
        self.config = dict(config)
        self.module = module
        self._relower = relower

    op = property(lambda self: self.workload.op)
    attrs = property(lambda self: self.workload.attrs)
    shapes = property(lambda self: self.workload.shapes)
    dtypes = property(lambda self: self.workload.dtypes)
    out_dtypes = property(lambda self: self.workload.out_dtypes)

    # -- calling ------------------------------------------------------------------
    @cached_property
    def _func(self):
        check_runs_here(self.target, op=self.op.name)
        if not self.module.is_runnable():
            raise KernelRuntimeError(f"kernels for {self.target} cannot run on this machine (no device); "
                                     "use .source() or export it", op=self.op.name)
        return self.module["main"]

    def __call__(self, *args):
        """Run on numpy arrays (returns numpy) or TVM tensors (returns TVM tensors)."""
        if len(args) != len(self.shapes):
            raise ShapeError(f"got {len(args)} argument(s), expected {len(self.shapes)}", op=self.op.name,
                             arg="inputs")
        as_numpy = any(not isinstance(a, tvm.runtime.Tensor) for a in args)
        dev = self.target.device()
        if not dev.exist:
            raise KernelRuntimeError(f"no {self.target.kind} device on this machine to run a {self.target} kernel; "
                                     "its .source() and .script() are available", op=self.op.name)
        tensors = [self._to_device(i, a, dev) for i, a in enumerate(args)]
        actual = [tuple(int(d) for d in t.shape) for t in tensors]
        self._bind(actual)
        outs = self._out_shapes(actual)
        results = [tvm.runtime.empty(s, d, dev) for s, d in zip(outs, self.out_dtypes)]
        self.launch(tensors, results)
        if self.op.data_dependent:
            results = [actual_rows(*results)]
        if as_numpy:
            results = [r.numpy() for r in results]
        return results if self.op.multi_output else results[0]

    def output_specs(self, shapes) -> list[tuple[tuple, str]]:
        """``(shape, dtype)`` of each output for inputs of ``shapes`` (checked
        against the kernel's signature, symbolic dims bound consistently)."""
        shapes = [tuple(int(d) for d in s) for s in shapes]
        self._bind(shapes)
        return list(zip(self._out_shapes(shapes), self.out_dtypes))

    def launch(self, inputs, outputs, checked: bool = False) -> None:
        """Run on device tensors, writing ``outputs`` (allocated by the caller,
        e.g. with ``output_specs``; an output may be an input's memory when the
        op declares ``inplace``). No checks beyond the kernel's own;
        ``checked``: the caller knows no output is empty."""
        if checked or all(size(tuple(o.shape)) > 0 for o in outputs):
            try:
                self._func(*inputs, *outputs)
            except Exception as exc:  # noqa: BLE001 - TVM raises C++-backed errors
                raise KernelRuntimeError(f"kernel failed: {tvm_message(exc, 300)}", op=self.op.name) from exc

    def _to_device(self, i, value, dev):
        want = self.dtypes[i]
        if isinstance(value, tvm.runtime.Tensor):
            if str(value.dtype) != want:
                raise DTypeError(f"got {value.dtype}, expected {want}", op=self.op.name, arg=f"input {i}")
            return value
        arr = np.asarray(value)
        if str(arr.dtype) != want:
            raise DTypeError(f"got {arr.dtype}, expected {want}", op=self.op.name, arg=f"input {i}")
        return tvm.runtime.tensor(arr if arr.flags.c_contiguous else arr.copy(order="C"), dev)

    def _bind(self, actual):
        """Check actual shapes against the signature; symbolic dims must agree."""
        bound = {}
        for i, (decl, got) in enumerate(zip(self.shapes, actual)):
            ok = len(decl) == len(got)
            for d, g in zip(decl, got) if ok else ():
                if is_static(d):
                    ok = ok and static(d) == g
                else:
                    ok = ok and bound.setdefault(str(d), g) == g
            if not ok:
                raise ShapeError(f"got {shape_str(got)}, expected {shape_str(decl)} (this kernel's signature)",
                                 op=self.op.name, arg=f"input {i}")

    def _out_shapes(self, actual):
        shapes = self.op.infer_shape(*actual, **self.attrs)
        if self.op.data_dependent:  # the storage of the upper bound, and the actual length
            shapes = [upper_bounds(shapes), (1,)]
        shapes = shapes if self.op.multi_output or self.op.data_dependent else [shapes]
        return [tuple(int(static(d)) for d in s) for s in shapes]

    # -- inspecting ---------------------------------------------------------------
    @cached_property
    def _lowered(self):
        return self._relower()

    def ir(self):
        """The scheduled TensorIR module the kernel was compiled from."""
        return self._lowered.sch.mod

    def script(self) -> str:
        """The scheduled function as TVMScript."""
        return self.ir().script()

    def source(self) -> str:
        """The generated code: LLVM IR for the CPU, CUDA C for GPUs."""
        text = _module_source(self.module, self.target)
        if not text:  # a shared library (the kernel cache's) keeps no source: generate it again from the IR
            text = _module_source(compile_lowered(self.workload, self._lowered, self.target).mod, self.target)
        return text

    def assembly(self) -> str:
        """The CPU code as assembly (compiled again from the IR: a cached kernel keeps only its library)."""
        if self.target.kind != "cpu":
            raise TargetError(f"got a {self.target.kind} kernel, expected a CPU one: its code is source()",
                              op=self.op.name, arg="target")
        return compile_lowered(self.workload, self._lowered, self.target).mod.inspect_source("asm")

    @property
    def template(self) -> str:
        return self._lowered.template

    def resolved_config(self) -> dict:
        """Every knob the template declared, with the value this kernel used."""
        return self._lowered.cfg.resolved()

    def time(self, *args, number: int = 10, repeat: int = 5, min_repeat_ms: int = 50) -> dict:
        """Seconds per call: ``{"mean", "median", "min", "max", "std", "results"}``."""
        check_runs_here(self.target, op=self.op.name)
        dev = self.target.device()
        tensors = [self._to_device(i, a, dev) for i, a in enumerate(args)]
        actual = [tuple(int(d) for d in t.shape) for t in tensors]
        self._bind(actual)
        outs = [tvm.runtime.empty(s, d, dev) for s, d in zip(self._out_shapes(actual), self.out_dtypes)]
        timer = self.module.time_evaluator("main", dev, number=number, repeat=repeat, min_repeat_ms=min_repeat_ms)
        res = timer(*tensors, *outs)
        results = [float(r) for r in res.results]
        return {"mean": res.mean, "median": res.median, "min": res.min, "max": res.max, "std": res.std,
                "results": results}

    def __repr__(self) -> str:
        sig = ", ".join(f"{shape_str(s)}:{d}" for s, d in zip(self.shapes, self.dtypes))
        return f"<kiln kernel {self.op.name}({sig}) on {self.target}>"
