"""``Predictor``: run a model written by ``kiln.export`` — needs only TVM.

A call is on the model's critical path (a small MLP's whole call at batch 1
is a few µs), so ``__call__`` does only what it must in Python: the input
checks, with everything they compare against precomputed at load; the inputs
passed to the kernels through DLPack without a copy. The first call at a
batch size runs the module's VM function and records it (``replay.py``);
later calls at that size replay its kernels on the recorded buffers without
the VM's instructions (6 of a batch-1 MLP's 10 µs), and return a copy of the
outputs. A model of one input and one output takes a path of its own that
does nothing for the general case. ``Predictor.profile`` times each kernel
of one call. The model's inputs, outputs and entry functions are read from
its metadata (``metadata.py``: both formats).
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tvm
import tvm_ffi
from tvm import relax
from tvm_ffi import from_dlpack

from .. import config
from ..errors import AttrError, DTypeError, ExportError, ShapeError, tvm_message
from .device import host
from .elf import elf_problem
from .metadata import ALIGN, choose_entry, parse_entries, read_signature
from .replay import Replay, overlaps, record

DLPACK_VERSION = (1, 0)  # the versioned protocol carries a read-only flag, so read-only arrays export too
MAX_PLANS = 4  # input shapes (batch sizes, sequence lengths) whose recorded calls (and buffers) a Predictor keeps; the oldest goes first
_UNRECORDED = object()


@dataclass
class Profile:
    """Where one call's time goes: ``rows`` of ``{"kernel", "shapes", "ms",
    "share"}`` (median over the repeats; ``shapes`` are the kernel's
    argument shapes, output last), kernels by time first, then the time
    outside them, so ``ms`` sums to ``total_ms``: a plain call's median time,
    or the kernels' sum where, timed alone, they add up to more.
    ``str(profile)`` is the table."""

    rows: list[dict]
    total_ms: float
    batch: int

    def table(self) -> str:
        """The rows as an aligned text table, with a total line."""
        shapes = [", ".join("x".join(map(str, s)) or "scalar" for s in row["shapes"]) for row in self.rows]
        width = max([len("kernel")] + [len(row["kernel"]) for row in self.rows])
        swidth = max([len("shapes")] + [len(s) for s in shapes])
        lines = [f"{'kernel':<{width}}  {'shapes':<{swidth}}  {'ms':>9}  {'share':>6}"]
        for row, shown in zip(self.rows, shapes):
            lines.append(f"{row['kernel']:<{width}}  {shown:<{swidth}}  {row['ms']:>9.4f}  "
                         f"{row['share']:>6.1%}")
        lines.append(f"{'total (batch ' + str(self.batch) + ')':<{width + swidth + 2}}  {self.total_ms:>9.4f}  "
                     f"{1:>6.1%}")
        return "\n".join(lines)

    __str__ = table


class Predictor:
    """Load an exported model and run it on numpy batches.

    ``predictor(x)`` for a model of one input; ``predictor(ids, mask)`` (in
    the order of ``inputs``) or ``predictor(ids=..., mask=...)`` for several.
    A call returns the one output as an array, several as a tuple, and the
    outputs of a model whose forward returned a dict as a dict by name.
    ``inputs`` and ``outputs`` describe them (``metadata.Spec``: name, shape
    with ``None`` for a dim the batch sets, dtype).

    Load only files you trust: an exported model is a shared library, and
    loading it runs its native code (a library's constructors run as it is
    loaded, before kiln can check that it is a kiln model at all). A file from
    someone else can do anything your user can.

    A Predictor serves one thread at a time (the VM and the aligned input
    buffers are its own); make one per thread to run models concurrently.

    Raises ``ExportError`` for a missing, truncated or foreign file,
    ``ShapeError``/``DTypeError`` naming the input for inputs the model was
    not built for (a missing or unknown one, another dtype or shape, inputs
    that disagree on the batch), and ``ConfigError`` for an invalid
    ``KILN_NUM_THREADS`` (``kiln.config``).
    """

    def __init__(self, path):
        config.check()  # the model runs on TVM's thread pool, which that sizes
        self.path = Path(path)
        if not self.path.is_file():
            raise ExportError(f"no file at {self.path}", where="Predictor", arg="path")
        problem = elf_problem(self.path)
        if problem:
            raise ExportError(f"{self.path} is not a loadable module: {problem}", where="Predictor", arg="path")
        try:
            self._lib = tvm.runtime.load_module(str(self.path))
        except Exception as exc:  # noqa: BLE001 - dlopen errors come back as TVM errors
            raise ExportError(f"{self.path} is not a loadable module (truncated or foreign?): "
                              f"{tvm_message(exc, 200)}", where="Predictor", arg="path") from exc
        try:
            self.vm = relax.VirtualMachine(self._lib, tvm.cpu())
            self.meta = json.loads(bytes(self.vm["kiln_metadata"]().numpy()).decode())
        except Exception as exc:  # noqa: BLE001 - any module without kiln's metadata is foreign
            raise ExportError(f"{self.path} is not a kiln model", where="Predictor", arg="path") from exc
        signature = read_signature(self.meta, self.path)
        missing = sorted(set(self.meta.get("isa", ())) - host().isa)
        if missing:  # calling it would die of an illegal instruction
            raise ExportError(f"{self.path} was built for {self.meta.get('cpu')}, whose {', '.join(missing)} this "
                              f"CPU ({host().mcpu}) lacks: export it again on this machine, or with "
                              f"KILN_CPU={host().mcpu}", where="Predictor", arg="path")
        self.inputs, self.outputs = signature.inputs, signature.outputs
        self._entries = parse_entries(self.meta)
        try:  # looked up once: a lookup costs about a microsecond per call
            self._funcs = {name: self.vm[name] for _, _, name in self._entries}
        except Exception as exc:  # noqa: BLE001 - a missing function is a TVM error
            raise ExportError(f"{self.path} lacks an entry function its metadata lists: {tvm_message(exc, 200)}",
                              where="Predictor", arg="path") from exc
        # what each call compares against: per input (dtype, rank, fixed batch or None, the other dims: None for
        # the sequence length of a model exported with dynamic_seq)
        self._expect = [(np.dtype(s.dtype), len(s.shape), s.shape[0], s.shape[1:]) for s in self.inputs]
        self.max_seq = signature.max_seq
        self._sequenced = [i for i, s in enumerate(self.inputs) if len(s.shape) > 1 and s.shape[1] is None]
        self._aligns = list(signature.aligns)
        self._names = [s.name for s in self.inputs]
        self._batched = [i for i, s in enumerate(self.inputs) if s.shape[0] is None]
        self._returns, self._out_names = signature.returns, [s.name for s in self.outputs]
        self._simple = len(self.inputs) == 1 and self._returns == "array"  # the one-input, one-output path
        self._staged = [None] * len(self.inputs)  # per input (array, its tensor): an aligned copy TVM can take
        self._library = next((m for m in self._lib.imports if m.kind == "library"), None)  # the kernels
        self._plans: dict = {}  # input shapes -> their recorded call (a Replay), or None where the VM runs it
        self._recorder = None  # the VM that records calls (its own: the hook stays set)

    def __call__(self, *args, out=None, **named):
        """The model's outputs for the batch given as ``args`` (the inputs in
        order) and/or ``named`` (inputs by name).

        ``out``, when given, receives the outputs and is returned: for one
        output a writable C-contiguous array of its shape and dtype; for
        several, a tuple or list of such arrays in output order (a dict by
        output name where the model returns a dict).

        An input is read in place when it is C-contiguous (and, for a module
        exported before kernels read unaligned input, 64-byte aligned), else
        copied once into an aligned buffer. The returned arrays own their
        memory: later calls never change them.
        """
        if self._simple and len(args) == 1 and not named:
            x = np.asarray(args[0])
            self._check(x)
            plan = self._plans.get((x.shape,), _UNRECORDED)
            if type(plan) is Replay:  # the common call: replayed, and the output copied out of the plan
                view = plan([x], self._argument)[0]
                if out is None:
                    return view.copy()
                self._check_out(out, view, "out")
                np.copyto(out, view)
                return out
            arrays, batch = [x], x.shape[0]
        else:
            arrays, batch = self._gather(args, named)
        return self._deliver(*self._run(arrays, batch), out)

    def _gather(self, args: tuple, named: dict) -> tuple[list, int]:
        """The inputs in order as arrays, checked, and the batch size."""
        names = ", ".join(self._names)
        if len(args) > len(self._names):
            raise ShapeError(f"got {len(args)} inputs, expected {len(self._names)} ({names})", where="Predictor",
                             arg="inputs")
        given = dict(zip(self._names, args))
        for name, value in named.items():
            if name not in self._names or name in given:
                problem = f"input {name!r} twice (by position and by name)" if name in given else \
                    f"an unknown input {name!r}; the model's inputs: {names}"
                raise ShapeError(f"got {problem}", where="Predictor", arg=name)
            given[name] = value
        missing = [name for name in self._names if name not in given]
        if missing:
            raise ShapeError(f"missing input {', '.join(map(repr, missing))}; the model's inputs: {names}",
                             where="Predictor", arg=missing[0])
        arrays = [np.asarray(given[name]) for name in self._names]
        for i, x in enumerate(arrays):
            self._check(x, i)
        lead = self._batched[0] if self._batched else 0
        batch = arrays[lead].shape[0]
        for i in self._batched:
            if arrays[i].shape[0] != batch:
                raise ShapeError(f"got a batch of {arrays[i].shape[0]} for {self._names[i]!r} and {batch} for "
                                 f"{self._names[lead]!r}: every input's first dim is the batch", where="Predictor",
                                 arg=self._names[i])
        for i in self._sequenced[1:]:
            first = self._sequenced[0]
            if arrays[i].shape[1] != arrays[first].shape[1]:
                raise ShapeError(f"got a sequence of {arrays[i].shape[1]} for {self._names[i]!r} and "
                                 f"{arrays[first].shape[1]} for {self._names[first]!r}: every input's second dim is "
                                 "the sequence", where="Predictor", arg=self._names[i])
        return arrays, batch

    def _run(self, arrays: list, batch: int) -> tuple[list, list]:
        """The outputs of a call on ``arrays`` as numpy views, and whether
        each is the caller's already (else it is the plan's memory, or the
        memory of an input or of an earlier output, and is copied)."""
        plan = self._plans.get(tuple(a.shape for a in arrays), _UNRECORDED)
        if type(plan) is Replay:
            return plan(arrays, self._argument), [False] * len(plan.outputs)
        args = [self._argument(x, None, i) for i, x in enumerate(arrays)]
        if plan is _UNRECORDED:
            result, plan = self._record(batch, args, tuple(a.shape for a in arrays))
        else:
            result = self._funcs[choose_entry(self._entries, batch, self._names[0])](*args)
        if plan is not None:  # the plan's own memory, which its next call overwrites
            return plan.outputs, [False] * len(plan.outputs)
        # the VM allocates each output afresh and numpy's view keeps it alive, so it is the caller's; only a model
        # returning an input unchanged (or one value twice) hands back memory that is not
        tensors = list(result) if isinstance(result, tvm_ffi.Array) else [result]
        owned = [all(t.data_ptr() != a.data_ptr() for a in args + tensors[:k]) for k, t in enumerate(tensors)]
        return [np.from_dlpack(t) for t in tensors], owned

    def _deliver(self, views: list, owned: list, out):
        """The outputs as the model returns them (copies where not the caller's), or written into ``out``."""
        if out is None:
            results = [v if mine else v.copy() for v, mine in zip(views, owned)]
            if self._returns == "array":
                return results[0]
            return tuple(results) if self._returns == "tuple" else dict(zip(self._out_names, results))
        if self._returns == "array":
            targets = [out]
        elif self._returns == "dict" and isinstance(out, dict) and set(out) == set(self._out_names):
            targets = [out[name] for name in self._out_names]
        elif self._returns == "tuple" and isinstance(out, (tuple, list)) and len(out) == len(views):
            targets = list(out)
        else:
            kind = f"a dict of {', '.join(self._out_names)}" if self._returns == "dict" else \
                f"a tuple of {len(views)} arrays"
            raise ShapeError(f"got {type(out).__name__}, expected {kind}", where="Predictor", arg="out")
        for target, view, name in zip(targets, views, self._out_names):
            self._check_out(target, view, "out" if self._returns == "array" else f"out[{name!r}]")
        for target, view in zip(targets, views):
            np.copyto(target, view)
        return out

    def _record(self, batch: int, args: list, shapes: tuple) -> tuple:
        """Run the call for ``batch`` once, recording it: ``(result, its
        Replay or None)``; the plan is kept for the later calls on inputs of
        these ``shapes``. Inputs that
        share memory run on the VM unrecorded (which input a kernel reads
        would be ambiguous): a later call records."""
        entry = choose_entry(self._entries, batch, self._names[0])
        if any(overlaps(a, b) for k, a in enumerate(args) for b in args[:k]):
            return self._funcs[entry](*args), None
        if self._library is None:
            result, plan = self._funcs[entry](*args), None
        else:
            if self._recorder is None:
                self._recorder = relax.VirtualMachine(self._lib, tvm.cpu())
            result, plan = record(self._recorder, entry, self._library, args)
        if len(self._plans) >= MAX_PLANS:
            self._plans.pop(next(iter(self._plans)))
        self._plans[shapes] = plan
        return result, plan

    def profile(self, *args, repeat: int = 100, **named) -> Profile:
        """Time each kernel of a call on the inputs (given as to a call; an
        input named ``repeat`` by position: the median of ``repeat`` runs of
        it alone, on the arguments the call gave it) and a whole call (the median of ``repeat`` plain calls); what the
        kernels do not account for is the call's own work: its Python side,
        and the VM's instructions where the call is not replayed
        (``replay.py``).

        The kernels and their arguments come from one call through the VM's
        instrumentation hook (on a separate VM, so plain calls stay
        uninstrumented); a hook runs Python around every call, so it is not
        used for timing.
        """
        if type(repeat) is not int or repeat < 1:
            raise AttrError(f"got {repeat!r}, expected a positive int", where="Predictor.profile", arg="repeat")
        arrays, batch = self._gather(args, named)
        self(*arrays)  # warms the caches
        library = self._library
        calls = []  # (symbol, tensor arguments) of each kernel call, in order

        def instrument(func, symbol, before, ret, *args):  # noqa: ARG001 - the hook's fixed signature
            if before and library is not None and library.implements_function(symbol):
                calls.append((symbol, list(args)))  # tensors, and the sizes of a kernel's symbolic dims
            return 0

        vm = relax.VirtualMachine(self._lib, tvm.cpu())
        vm.set_instrument(instrument)
        vm[choose_entry(self._entries, batch, self._names[0])](*(self._argument(x, None, i)
                                                                for i, x in enumerate(arrays)))
        rows = []
        for symbol, tensors in calls:
            timer = library.time_evaluator(symbol, tvm.cpu(), number=1, repeat=repeat)
            rows.append({"kernel": symbol, "shapes": [tuple(a.shape) for a in tensors
                                                      if isinstance(a, tvm.runtime.Tensor)],
                         "ms": 1e3 * float(timer(*tensors).median)})
        rows.sort(key=lambda row: -row["ms"])
        total_ms = 1e3 * _median_seconds(lambda: self(*arrays), repeat)
        rows.append({"kernel": "(outside kernels)", "shapes": [],
                     "ms": max(0.0, total_ms - sum(row["ms"] for row in rows))})
        total_ms = max(total_ms, sum(row["ms"] for row in rows))  # kernels timed alone may add up to more
        for row in rows:
            row["share"] = row["ms"] / total_ms
        return Profile(rows, total_ms, int(batch))

    def _check(self, x: np.ndarray, i: int = 0) -> None:
        dtype, rank, fixed, tail = self._expect[i]
        if x.dtype != dtype:
            raise DTypeError(f"got {x.dtype}, expected {dtype}: the model was exported for {dtype} (convert with "
                             f"{self._names[i]}.astype({str(dtype)!r}))", where="Predictor", arg=self._names[i])
        shape = x.shape
        if len(shape) != rank or (shape[0] < 1 if fixed is None else shape[0] != fixed) or not all(
                d == w or w is None and 1 <= d <= (self.max_seq or d) for d, w in zip(shape[1:], tail)):
            dims = ["N" if fixed is None else str(fixed)] + ["L" if w is None else str(w) for w in tail]
            limits = ["N >= 1"] * (fixed is None) + [f"1 <= L <= {self.max_seq}" if self.max_seq else "L >= 1"] * (
                None in tail)
            raise ShapeError(f"got {shape}, expected ({', '.join(dims)}){' with ' if limits else ''}"
                             f"{', '.join(limits)}", where="Predictor", arg=self._names[i])

    def _argument(self, x: np.ndarray, shape: tuple | None = None, i: int = 0):
        """Input ``i`` given as ``x`` (reshaped to ``shape`` when given) as a
        TVM tensor: its own memory when it is C-contiguous and aligned as the
        module's kernels need, else a copy in the input's stage, an aligned
        buffer kept for its next value of the same shape."""
        if shape is not None and x.shape != shape:
            x = x.reshape(shape)
        arg = from_dlpack(x.__dlpack__(max_version=DLPACK_VERSION))
        if arg.data_ptr() % self._aligns[i] == 0 and x.flags.c_contiguous:
            return arg
        staged = self._staged[i]
        if staged is None or staged[0].shape != x.shape:
            buf = np.empty(x.nbytes + ALIGN, np.uint8)
            start = -buf.ctypes.data % ALIGN
            view = buf[start:start + x.nbytes].view(x.dtype).reshape(x.shape)
            staged = self._staged[i] = view, from_dlpack(view)
        np.copyto(staged[0], x)
        return staged[1]

    @staticmethod
    def _check_out(out, result: np.ndarray, arg: str) -> None:
        if not isinstance(out, np.ndarray) or out.dtype != result.dtype:
            got = out.dtype if isinstance(out, np.ndarray) else type(out).__name__
            raise DTypeError(f"got {got}, expected a numpy array of {result.dtype}", where="Predictor", arg=arg)
        if out.shape != result.shape or not out.flags.c_contiguous or not out.flags.writeable:
            raise ShapeError(f"got a{'' if out.flags.writeable else ' read-only'}"
                             f"{'' if out.flags.c_contiguous else ' non-contiguous'} array of shape {out.shape}, "
                             f"expected a writable C-contiguous array of shape {result.shape}", where="Predictor",
                             arg=arg)


def _median_seconds(call, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return float(np.median(times))
