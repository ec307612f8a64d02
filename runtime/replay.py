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
allocation, views), each input reaches the kernels only whole (itself, or a
view of all of it: a reshape), and each output is memory a kernel wrote
(not an input). Otherwise ``record`` returns no plan and the caller goes
on calling the VM. A model of several inputs and outputs replays the same
way: a slot per place an input is read, the outputs a list.
"""
from __future__ import annotations

import numpy as np
import tvm
import tvm_ffi

#: the VM's instructions that only check shapes, allocate, make views or gather tensors into a tuple (and pick
#: them out of one): nothing a replay must redo
BOOKKEEPING = frozenset({
    "vm.builtin.alloc_shape_heap", "vm.builtin.check_tensor_info", "vm.builtin.match_shape",
    "vm.builtin.make_shape", "vm.builtin.reshape", "vm.builtin.alloc_storage", "vm.builtin.alloc_tensor",
    "vm.builtin.null_value", "vm.builtin.make_tuple", "vm.builtin.tuple_getitem",
})


class Replay:
    """The kernels of one recorded call, in order, each with its arguments;
    ``reads`` are the tensors the inputs are read as (``(input, shape)``: the
    input, itself or a reshape of it) and ``slots`` where each goes
    (``(step, position, k)``: read ``k``). ``outputs`` are the results as
    numpy views of the plan's own memory: a call overwrites them."""

    def __init__(self, steps: list, slots: list, reads: list, results: list):
        self._steps = steps
        self._slots = slots
        self.reads = reads
        self._results = results  # keeps the results' memory (and through the steps, every buffer) alive
        self.outputs = [np.from_dlpack(r) for r in results]

    def __call__(self, arrays: list, argument) -> list[np.ndarray]:
        """Run the kernels on the inputs ``arrays``: ``argument(arrays[i],
        shape, i)`` gives input ``i`` as a tensor of ``shape`` (with the
        recorded dtype and alignment); returns ``outputs``."""
        steps = self._steps
        tensors = [argument(arrays[i], shape, i) for i, shape in self.reads]
        for step, position, k in self._slots:
            steps[step][1][position] = tensors[k]
        try:
            for func, args in steps:
                func(*args)
        finally:
            for step, position, _ in self._slots:  # the caller's memory is not kept beyond the call
                steps[step][1][position] = None
        return self.outputs


def record(vm, entry: str, library, args: list) -> tuple[object, Replay | None]:
    """Call ``vm[entry](*args)`` once under the instrumentation hook of ``vm``
    (a VM of its own: the hook stays set) and return ``(result, plan)``:
    the call's result, and its ``Replay`` or None where a replay would not
    be the same computation (see the module docstring). ``library`` is the
    module holding the kernels; ``args`` must not share memory (which input
    a kernel reads would be ambiguous)."""
    steps, others = [], set()

    def hook(func, symbol, before, ret, *args):  # noqa: ARG001 - the hook's fixed signature
        if before:
            if library.implements_function(symbol):
                steps.append((symbol, list(args)))
            elif symbol not in BOOKKEEPING:
                others.add(symbol)
        return 0

    vm.set_instrument(hook)
    result = vm[entry](*args)
    results = list(result) if isinstance(result, tvm_ffi.Array) else [result]  # several outputs: a tuple
    if others or not all(isinstance(r, tvm.runtime.Tensor) for r in results):
        return result, None
    reads = []
    for i, arg in enumerate(args):
        found = _input_reads(steps, arg)
        if found is None:
            return result, None
        reads += [(step, position, (i, shape)) for step, position, shape in found]
    passed = [a for _, kernel_args in steps for a in kernel_args if isinstance(a, tvm.runtime.Tensor)]
    if any(overlaps(r, a) for r in results for a in args) or not all(
            any(overlaps(a, r) for a in passed) for r in results):
        return result, None
    keys = sorted({key for _, _, key in reads})
    for step, position, _ in reads:  # the plan keeps its buffers, not the caller's inputs
        steps[step][1][position] = None
    slots = [(step, position, keys.index(key)) for step, position, key in reads]
    return result, Replay([(library[symbol], kernel_args) for symbol, kernel_args in steps], slots, keys, results)


def _input_reads(steps: list, arg) -> list | None:
    """Where the kernels read ``arg``: ``(step, position, the shape read
    as)``; None where one reads only part of it, or at an offset."""
    reads = []
    for i, (_, args) in enumerate(steps):
        for j, a in enumerate(args):
            if not isinstance(a, tvm.runtime.Tensor) or not overlaps(a, arg):
                continue
            if a.data_ptr() != arg.data_ptr() or _nbytes(a) != _nbytes(arg) or a.dtype != arg.dtype:
                return None
            reads.append((i, j, tuple(int(d) for d in a.shape)))
    return reads


def _nbytes(t) -> int:
    return int(np.prod(t.shape, dtype=np.int64)) * np.dtype(str(t.dtype)).itemsize


def overlaps(a, b) -> bool:
    """Whether the memory of tensors ``a`` and ``b`` (on the CPU) overlaps."""
    return a.data_ptr() < b.data_ptr() + _nbytes(b) and b.data_ptr() < a.data_ptr() + _nbytes(a)
