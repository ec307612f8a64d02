"""Which knob values a kernel of an exported module runs with, by the rows
its entry function serves: the batch-entry policy.

A module with a symbolic batch has one entry function per batch range
(``ENTRIES``: 1-8, 9-32, more rows), each with its own kernels, scheduled
for those rows; a tuned batch size gets an entry compiled for it
(``graph.lower.build_module``). The thresholds below were set on the digits
MLP and CNN exports, each call timed interleaved before and after (the
models of ``kiln bench --suite inference``); the figures, per machine, are
in ``benchmarks/RESULTS.md`` ("The batch-entry thresholds").

A kernel's rows are what its symbolic dims come to at a batch: the batch
itself for an image model's convolution, ``batch * 128`` for the dense
layers of a transformer on 128 tokens (a batch of 1 is 128 rows, no GEMV),
``batch * 12`` for its attention's batched products."""
from __future__ import annotations

import numpy as np

from .ir import concrete

#: multiply-adds (or elements, for kernels with no arithmetic to speak of)
#: below which a kernel runs on one thread: a parallel launch costs a few
#: microseconds. The digits MLP's dense 64 x 64 -> 128 at 64 rows (0.5M)
#: gains from two threads; its 128 -> 10 (82K) would not
PARALLEL_WORK = 1 << 19

#: bytes of activations (the first input and the outputs) from which a kernel
#: runs on every thread whatever its work: the data a parallel producer left
#: split across the cores' caches is read where it lies, and a parallel
#: consumer reads it so. The digits CNN at 64 rows: its 1 -> 16 channel conv
#: (0.6M multiply-adds, 278 KB) and its pooling (524 KB) on one thread made
#: its 16 -> 32 channel conv and themselves slower than timed alone; at 16
#: rows, 131 KB, they stay on one thread
PARALLEL_BYTES = 1 << 18


def _one_thread(space: dict) -> dict:
    return {k: 0 for k in space if k.split(".")[-1].split("_")[-1] == "parallel"}  # parallel, pad.parallel, x_parallel


#: the length a symbolic sequence (``graph.trace``'s ``dynamic_seq``) is
#: taken at where a kernel's rows are estimated: BERT's and GPT-2's usual 128
SEQ_ESTIMATE = 128


def _elements(shape, batch: int) -> int:
    """Elements of ``shape`` with its symbolic dims at ``batch`` (a sequence at ``SEQ_ESTIMATE``)."""
    return int(np.prod(concrete(tuple(shape), batch, SEQ_ESTIMATE)))


def _work(workload, batch: int) -> float:
    """Multiply-adds (or output elements) of the workload at ``batch``."""
    shapes = [concrete(tuple(s), batch, SEQ_ESTIMATE) for s in workload.shapes]
    elements = sum(_elements(s, batch) for s in workload.out_shapes)
    return max(workload.op.flops(shapes, **concrete(workload.attrs, batch, SEQ_ESTIMATE)) / 2, elements)


def _activation_bytes(workload, batch: int) -> int:
    """Bytes of the first input and the outputs at ``batch``."""
    pairs = [(workload.shapes[0], workload.dtypes[0]), *zip(workload.out_shapes, workload.out_dtypes)]
    return sum(_elements(s, batch) * np.dtype(dtype).itemsize for s, dtype in pairs)


def _threads(space: dict, workload, batch: int) -> dict:
    """One thread when the workload at ``batch`` is less than
    ``PARALLEL_WORK`` and moves less than ``PARALLEL_BYTES``."""
    small = _work(workload, batch) < PARALLEL_WORK and _activation_bytes(workload, batch) < PARALLEL_BYTES
    return _one_thread(space) if small else {}


def _few_rows_config(space: dict, workload) -> dict:
    """Knob values for a kernel serving a batch of 1-8: the template's own
    ``few_rows`` schedule where it has one and a batch of 8 gives it at most
    8 rows (a transformer's dense layer gets 8 x its tokens: the defaults'
    register tiles); else the template's defaults, on one thread where a
    batch of 1 is below ``PARALLEL_WORK`` and ``PARALLEL_BYTES`` (the
    digits models' layers: for so little work a parallel launch costs more
    than it saves; a 224x224 image's convolutions run on every thread)."""
    if "few_rows" in space and _elements(workload.shapes[0][:-1], 8) <= 8:
        return {"few_rows": 1}
    return _threads(space, workload, 1)


def _some_rows_config(space: dict, workload) -> dict:
    """Knob values for a kernel serving a batch of 9-32: the template's
    defaults (for dense, a register tile of 8 rows and a copy of the rows,
    faster than without at 16 rows of 784 -> 512 and of 64 -> 128), on one
    thread below ``PARALLEL_WORK`` at 16 rows (the digits CNN's 1->16
    channel conv, its pooling), else in parallel (its 16->32 channel conv
    at 16 rows runs faster on two threads than on one)."""
    return _threads(space, workload, 16)


def _many_rows_config(space: dict, workload) -> dict:
    """Knob values for a kernel serving more than 32 rows: the template's
    defaults, on one thread when 64 rows are below ``PARALLEL_WORK`` (a
    layer so small per row that its launch would cost more than its work)."""
    return _threads(space, workload, 64)


def static_config(space: dict, workload) -> dict:
    """Knob values for a kernel of static shapes (a training step's): the
    template's defaults, on one thread when its whole work is below
    ``PARALLEL_WORK``."""
    return _threads(space, workload, 1)


#: the entry functions of a module with a symbolic batch, the first whose
#: ``max_batch`` covers a batch runs it: (name, max_batch, the knob values for
#: a kernel's template given its knobs and workload)
ENTRIES = (("main_small", 8, _few_rows_config), ("main_some", 32, _some_rows_config),
           ("main", None, _many_rows_config))


def entry_configure(batch: int):
    """The knob values of the entry serving ``batch`` (``ENTRIES``): what a
    kernel of a model exported without tuning runs at that batch."""
    return next(configure for _, limit, configure in ENTRIES if limit is None or batch <= limit)


def settle(workload, configure, lower_fn):
    """``(lowered, config)``: ``configure(knobs, workload)``'s values applied
    until they hold (a config can bring knobs of its own, a pad stage's);
    ``lower_fn(config)`` schedules the workload with a config."""
    lowered, config = lower_fn({}), {}
    for _ in range(3):
        wanted = {**config, **configure(lowered.cfg.space, workload)} if configure else {}
        if wanted == config:
            break
        config = wanted
        lowered = lower_fn(config)
    return lowered, config
