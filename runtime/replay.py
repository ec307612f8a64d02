"""A model's VM call recorded once per input shape, then replayed without the VM.

The Relax VM interprets an entry function instruction by instruction: it
checks and matches shapes, allocates storage and tensors, makes views and
calls each kernel, every instruction a call through TVM's FFI. For an MLP
at batch 1 that is 21 instructions and about 6 µs of a 10 µs call whose
two kernels take 0.8 µs. For one input shape every call runs the same
kernels on the same buffers (the export's memory plan is static), so
``record`` runs the function once under the VM's instrumentation hook and
keeps each kernel with the arguments it was given (the buffers the VM
allocated, which the plan keeps alive), and a ``Replay`` call runs those
kernels in order with the new input put where the recorded one was read:
what TVM's graph executor and ONNX Runtime's execution plans do for static
shapes.

A call is kept only where replaying it is the same computation: every
instruction other than a kernel is one of ``BOOKKEEPING`` (shape checks,
allocation, views), the input reaches the kernels only whole (itself, or a
view of all of it: a reshape), and the result is memory a kernel wrote
(not the input). Otherwise ``record`` returns no plan and the caller goes
on calling the VM.
"""
from __future__ import annotations

import numpy as np
import tvm

#: the VM's instructions that only check shapes, allocate or make views: nothing a replay must redo
BOOKKEEPING = frozenset({
    "vm.builtin.alloc_shape_heap", "vm.builtin.check_tensor_info", "vm.builtin.match_shape",
    "vm.builtin.make_shape", "vm.builtin.reshape", "vm.builtin.alloc_storage", "vm.builtin.alloc_tensor",
    "vm.builtin.null_value",
})


class Replay:
    """The kernels of one recorded call, in order, each with its arguments;
    ``slots`` name where the input goes (``(step, position, k)``: a tensor of
    the input of shape ``shapes[k]``, itself or a reshape of it). ``output``
    is the result as a numpy view of the plan's own memory: a call
    overwrites it."""

    def __init__(self, steps: list, slots: list, shapes: list, result):
        self._steps = steps
        self._slots = slots
        self.shapes = shapes
        self._result = result  # keeps the result's memory (and through the steps, every buffer) alive
        self.output = np.from_dlpack(result)

    def __call__(self, argument) -> np.ndarray:
        """Run the kernels on the input: ``argument(shape)`` gives it as a
        tensor of ``shape`` (with the recorded dtype and alignment); returns
        ``output``."""
        steps = self._steps
        tensors = [argument(shape) for shape in self.shapes]
        for step, position, k in self._slots:
            steps[step][1][position] = tensors[k]
        try:
            for func, args in steps:
                func(*args)
        finally:
            for step, position, _ in self._slots:  # the caller's memory is not kept beyond the call
                steps[step][1][position] = None
        return self.output


def record(vm, entry: str, library, arg) -> tuple[object, Replay | None]:
    """Call ``vm[entry](arg)`` once under the instrumentation hook of ``vm``
    (a VM of its own: the hook stays set) and return ``(result, plan)``:
    the call's result, and its ``Replay`` or None where a replay would not
    be the same computation (see the module docstring). ``library`` is the
    module holding the kernels."""
    steps, others = [], set()

    def hook(func, symbol, before, ret, *args):  # noqa: ARG001 - the hook's fixed signature
        if before:
            if library.implements_function(symbol):
                steps.append((symbol, list(args)))
            elif symbol not in BOOKKEEPING:
                others.add(symbol)
        return 0

    vm.set_instrument(hook)
    result = vm[entry](arg)
    if others or not isinstance(result, tvm.runtime.Tensor):
        return result, None
    reads = _input_reads(steps, arg)
    if reads is None or _overlaps(result, arg) or not any(
            _overlaps(a, result) for _, args in steps for a in args if isinstance(a, tvm.runtime.Tensor)):
        return result, None
    shapes = sorted({shape for _, _, shape in reads})
    for step, position, _ in reads:  # the plan keeps its buffers, not the caller's input
        steps[step][1][position] = None
    slots = [(step, position, shapes.index(shape)) for step, position, shape in reads]
    return result, Replay([(library[symbol], args) for symbol, args in steps], slots, shapes, result)


def _input_reads(steps: list, arg) -> list | None:
    """Where the kernels read ``arg``: ``(step, position, the shape read
    as)``; None where one reads only part of it, or at an offset."""
    reads = []
    for i, (_, args) in enumerate(steps):
        for j, a in enumerate(args):
            if not isinstance(a, tvm.runtime.Tensor) or not _overlaps(a, arg):
                continue
            if a.data_ptr() != arg.data_ptr() or _nbytes(a) != _nbytes(arg) or a.dtype != arg.dtype:
                return None
            reads.append((i, j, tuple(int(d) for d in a.shape)))
    return reads


def _nbytes(t) -> int:
    return int(np.prod(t.shape, dtype=np.int64)) * np.dtype(str(t.dtype)).itemsize


def _overlaps(a, b) -> bool:
    """Whether the memory of tensors ``a`` and ``b`` (on the CPU) overlaps."""
    return a.data_ptr() < b.data_ptr() + _nbytes(b) and b.data_ptr() < a.data_ptr() + _nbytes(a)
