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

import bisect

import numpy as np
import tvm
import tvm_ffi

#: the VM's instructions that only check shapes, allocate, make views or gather tensors into a tuple (and pick
#: them out of one), or make a symbolic size a kernel takes as an argument (``make_prim_value``: fixed for
#: the input shapes a plan is recorded for, and kept among the kernel's recorded arguments): nothing a replay
#: must redo
BOOKKEEPING = frozenset({
    "vm.builtin.alloc_shape_heap", "vm.builtin.check_tensor_info", "vm.builtin.match_shape",
    "vm.builtin.make_shape", "vm.builtin.reshape", "vm.builtin.alloc_storage", "vm.builtin.alloc_tensor",
    "vm.builtin.null_value", "vm.builtin.make_tuple", "vm.builtin.tuple_getitem", "vm.builtin.make_prim_value",
})


class Replay:
    """The kernels of one recorded call, in order, each with its arguments;
    ``reads`` are the tensors the inputs are read as (``(input, shape)``: the
    input, itself or a reshape of it) and ``slots`` where each goes
    (``(step, position, k)``: read ``k``). ``outputs`` are the results as
    numpy views of the plan's own memory: a call overwrites them; ``memory``
    is ``(bytes, bytes apart)``: its intermediates' arena and what they took
    before ``pack``."""

    def __init__(self, steps: list, slots: list, reads: list, results: list, memory: tuple = (0, 0)):
        self._steps = steps
        self.memory = memory
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
    steps, others, allocated = [], set(), []

    def hook(func, symbol, before, ret, *args):  # noqa: ARG001 - the hook's fixed signature
        if before:
            if library.implements_function(symbol):
                steps.append((symbol, list(args)))
            elif symbol not in BOOKKEEPING:
                others.add(symbol)
        elif symbol == "vm.builtin.alloc_tensor":
            allocated.append(ret)
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
    memory = pack(steps, allocated, results)
    return result, Replay([(library[symbol], kernel_args) for symbol, kernel_args in steps], slots, keys, results,
                          memory)


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


#: where the packed buffers start, relative to one another: a cache line (the alignment TVM's kernels assume)
PACK_ALIGN = 64


def pack(steps: list, allocated: list, results: list) -> tuple[int, int]:
    """Put the buffers the VM allocated for one call (``allocated``, its
    ``alloc_tensor`` results) into one arena, each at an offset no buffer
    live at the same time uses, and rewrite ``steps`` to use them; returns
    ``(arena bytes, bytes the buffers took apart)``. The export's memory
    plan reuses storage only between tensors of the same symbolic size, so
    a network of distinct layer shapes keeps every intermediate apart
    (MobileNetV2 at batch 1: 18.6 MB of buffers, which pack into 6.0 MB)
    and a call streams through more memory than the last-level cache
    holds. The results' memory stays where it is (the plan's outputs view
    it); a buffer no kernel touches is left alone."""
    regions, where = _live_regions(steps, allocated, results)
    if not regions:
        return 0, 0
    offsets, end = _place(regions)
    arena = np.empty(end + PACK_ALIGN, np.uint8)
    arena = arena[-arena.ctypes.data % PACK_ALIGN:]
    for (i, j), k in where.items():
        a, start = steps[i][1][j], offsets[k] + steps[i][1][j].data_ptr() - regions[k][0]
        view = arena[start:start + _nbytes(a)].view(str(a.dtype)).reshape([int(d) for d in a.shape])
        steps[i][1][j] = tvm.runtime.from_dlpack(view)  # numpy's DLPack export: offset 0, as kernels require
    return end, sum(r[1] - r[0] for r in regions)


def _live_regions(steps: list, allocated: list, results: list) -> tuple[list, dict]:
    """The memory ``allocated`` spans, overlapping tensors merged, as
    ``[start, end, first step, last step]`` (the steps whose kernels touch
    it), and ``{(step, position): region}`` for each kernel argument inside
    one. Regions the results overlap are left out."""
    merged = []
    for start, end in sorted((t.data_ptr(), t.data_ptr() + _nbytes(t)) for t in allocated if _nbytes(t)):
        if merged and start < merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end, None, None])
    merged = [r for r in merged if not any(r[0] < res.data_ptr() + _nbytes(res) and res.data_ptr() < r[1]
                                            for res in results)]
    starts, where = [r[0] for r in merged], {}
    for i, (_, args) in enumerate(steps):
        for j, a in enumerate(args):
            if not isinstance(a, tvm.runtime.Tensor):
                continue
            k = bisect.bisect_right(starts, a.data_ptr()) - 1
            if k >= 0 and a.data_ptr() + _nbytes(a) <= merged[k][1]:
                merged[k][2] = i if merged[k][2] is None else merged[k][2]
                merged[k][3] = i
                where[i, j] = k
    used = sorted({k for k in where.values()})
    renumber = {k: n for n, k in enumerate(used)}
    return [merged[k] for k in used], {key: renumber[k] for key, k in where.items()}


def _place(regions: list) -> tuple[list, int]:
    """Offsets for ``regions`` (``[start, end, first step, last step]``) in
    one arena, two live in a common step never overlapping: the largest
    first, each at the lowest aligned offset left free by those placed
    whose lives cross its own (greedy by size, as TensorFlow Lite's arena
    planner); returns ``(offsets, arena size)``."""
    offsets, placed = [0] * len(regions), []
    for k in sorted(range(len(regions)), key=lambda k: regions[k][0] - regions[k][1]):
        start, end, first, last = regions[k]
        offset = 0
        for o, size in sorted((offsets[q], regions[q][1] - regions[q][0]) for q in placed
                              if regions[q][2] <= last and first <= regions[q][3]):
            if offset + end - start <= o:
                break
            offset = max(offset, -(-(o + size) // PACK_ALIGN) * PACK_ALIGN)
        offsets[k] = offset
        placed.append(k)
    return offsets, max(offsets[k] + regions[k][1] - regions[k][0] for k in placed)
