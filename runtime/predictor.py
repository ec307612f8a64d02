"""``Predictor``: run a model written by ``kiln.export`` — needs only TVM.

A call is on the model's critical path (a small MLP's whole call at batch 1
is a few µs), so ``__call__`` does only what it must in Python: the input
checks, with everything they compare against precomputed at load; the input
passed to the kernels through DLPack without a copy. The first call at a
batch size runs the module's VM function and records it (``replay.py``);
later calls at that size replay its kernels on the recorded buffers without
the VM's instructions (6 of a batch-1 MLP's 10 µs), and return a copy of the
output. ``Predictor.profile`` times each kernel of one call.
"""
from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tvm
from tvm import relax
from tvm_ffi import from_dlpack

from .. import config
from ..errors import AttrError, DTypeError, ExportError, ShapeError, tvm_message
from .device import host
from .elf import elf_problem
from .replay import record

FORMAT = "kiln-model-1"
# TVM's compiled kernels assume their buffers are 64-byte aligned (they use aligned vector loads: an
# unaligned input crashes the process). An export declares how its kernels read the input
# ("input_align", graph/align.py: the dtype's size); a module without it gets inputs copied to 64 bytes
ALIGN = 64
DLPACK_VERSION = (1, 0)  # the versioned protocol carries a read-only flag, so read-only arrays export too
MAX_PLANS = 4  # batch sizes whose recorded calls (and buffers) a Predictor keeps; the oldest goes first
_UNRECORDED = object()


def parse_entries(meta: dict) -> list[tuple[int, int, str]]:
    """The model's entry functions as ``(lowest, highest batch, name)``, in
    the order to try.

    ``meta["entries"]`` (optional) lists ``{"name": ...}`` with either
    ``"batch"`` (the entry serves that batch size alone: kernels compiled for
    it, tuned ones where records existed) or ``"max_batch"`` (optional: it
    serves batches up to that; without either it serves any). Without the
    list, ``main`` serves every batch. Raises ``ExportError`` for a malformed
    list.
    """
    entries = meta.get("entries", [{"name": "main"}])
    if not isinstance(entries, list) or not entries:
        raise ExportError(f"metadata 'entries' is {entries!r}, expected a non-empty list", where="Predictor",
                          arg="path")
    parsed = []
    for entry in entries:
        limits = [entry.get(k) for k in ("batch", "max_batch")] if isinstance(entry, dict) else [None]
        if (not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or None not in limits
                or any(v is not None and (type(v) is not int or v < 1) for v in limits)):
            raise ExportError(f"metadata entry {entry!r} is not {{'name': str, 'batch' or 'max_batch': int >= 1 "
                              "(optional)}", where="Predictor", arg="path")
        exact, limit = limits
        parsed.append((exact or 1, exact or limit or sys.maxsize, entry["name"]))
    return parsed


def choose_entry(entries: list[tuple[int, int, str]], batch: int) -> str:
    """The first entry that serves ``batch``; ``ShapeError`` when none does
    (the model was exported for smaller batches only)."""
    for low, high, name in entries:
        if low <= batch <= high:
            return name
    raise ShapeError(f"got a batch of {batch}, the model serves batches up to {max(e[1] for e in entries)}",
                     where="Predictor", arg="x")


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

    Load only files you trust: an exported model is a shared library, and
    loading it runs its native code (a library's constructors run as it is
    loaded, before kiln can check that it is a kiln model at all). A file from
    someone else can do anything your user can.

    A Predictor serves one thread at a time (the VM and the aligned input
    buffer are its own); make one per thread to run models concurrently.

    Raises ``ExportError`` for a missing, truncated or foreign file,
    ``ShapeError``/``DTypeError`` for inputs the model was not built for, and
    ``ConfigError`` for an invalid ``KILN_NUM_THREADS`` (``kiln.config``).
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
        if self.meta.get("format") != FORMAT:
            raise ExportError(f"{self.path} has format {self.meta.get('format')!r}, expected {FORMAT!r}",
                              where="Predictor", arg="path")
        missing = sorted(set(self.meta.get("isa", ())) - host().isa)
        if missing:  # calling it would die of an illegal instruction
            raise ExportError(f"{self.path} was built for {self.meta.get('cpu')}, whose {', '.join(missing)} this "
                              f"CPU ({host().mcpu}) lacks: export it again on this machine, or with "
                              f"KILN_CPU={host().mcpu}", where="Predictor", arg="path")
        self.input_shape = tuple(self.meta["input_shape"])
        self.input_dtype = self.meta["input_dtype"]
        if None in self.input_shape[1:]:
            raise ExportError(f"{self.path} has input shape {self.input_shape}: only the batch dim may be symbolic",
                              where="Predictor", arg="path")
        self._entries = parse_entries(self.meta)
        try:  # looked up once: a lookup costs about a microsecond per call
            self._funcs = {name: self.vm[name] for _, _, name in self._entries}
        except Exception as exc:  # noqa: BLE001 - a missing function is a TVM error
            raise ExportError(f"{self.path} lacks an entry function its metadata lists: {tvm_message(exc, 200)}",
                              where="Predictor", arg="path") from exc
        # what each call compares against
        self._dtype = np.dtype(self.input_dtype)
        self._rank, self._batch, self._tail = len(self.input_shape), self.input_shape[0], self.input_shape[1:]
        self._align = self.meta.get("input_align", ALIGN)
        if type(self._align) is not int or self._align < 1:
            raise ExportError(f"{self.path} has input_align {self._align!r}, expected a positive int",
                              where="Predictor", arg="path")
        self._staged = None  # (array, its tensor): the aligned copy of an input TVM cannot take as it is
        self._library = next((m for m in self._lib.imports if m.kind == "library"), None)  # the kernels
        self._plans: dict = {}  # batch -> its recorded call (a Replay), or None where the VM runs it
        self._recorder = None  # the VM that records calls (its own: the hook stays set)

    def __call__(self, x, out: np.ndarray | None = None) -> np.ndarray:
        """The model's output for the batch ``x``; written into ``out`` (and
        ``out`` returned) when given: a writable C-contiguous array of the
        output's shape and dtype.

        ``x`` is read in place when it is C-contiguous (and, for a module
        exported before kernels read unaligned input, 64-byte aligned), else
        copied once into an aligned buffer. The returned array owns its
        memory: later calls never change it.
        """
        x = np.asarray(x)
        self._check(x)
        plan = self._plans.get(x.shape[0], _UNRECORDED)
        if plan is _UNRECORDED:
            arg = self._argument(x)
            result, plan = self._record(x.shape[0], arg)
        elif plan is None:
            arg = self._argument(x)
            result = self._funcs[choose_entry(self._entries, x.shape[0])](arg)
        else:
            plan(lambda shape: self._argument(x, shape))
        if plan is not None:  # the plan's own memory, which its next call overwrites
            view, owned = plan.output, False
        else:  # the VM allocates each output afresh and numpy's view keeps it alive, so it is the caller's;
            # only a model returning its input unchanged hands back memory that is not (the caller's, or the stage's)
            view = np.from_dlpack(result)
            owned = result.data_ptr() != arg.data_ptr()
        if out is None:
            return view if owned else view.copy()
        self._check_out(out, view)
        np.copyto(out, view)
        return out

    def _record(self, batch: int, arg) -> tuple:
        """Run the call for ``batch`` once, recording it: ``(result, its
        Replay or None)``; the plan is kept for the later calls."""
        if self._library is None:
            result, plan = self._funcs[choose_entry(self._entries, batch)](arg), None
        else:
            if self._recorder is None:
                self._recorder = relax.VirtualMachine(self._lib, tvm.cpu())
            result, plan = record(self._recorder, choose_entry(self._entries, batch), self._library, arg)
        if len(self._plans) >= MAX_PLANS:
            self._plans.pop(next(iter(self._plans)))
        self._plans[batch] = plan
        return result, plan

    def profile(self, x, repeat: int = 100) -> Profile:
        """Time each kernel of a call on the batch ``x`` (the median of
        ``repeat`` runs of it alone, on the arguments the call gave it) and a
        whole call (the median of ``repeat`` plain calls); what the kernels do
        not account for is the call's own work: its Python side, and the VM's
        instructions where the call is not replayed (``replay.py``).

        The kernels and their arguments come from one call through the VM's
        instrumentation hook (on a separate VM, so plain calls stay
        uninstrumented); a hook runs Python around every call, so it is not
        used for timing.
        """
        if type(repeat) is not int or repeat < 1:
            raise AttrError(f"got {repeat!r}, expected a positive int", where="Predictor.profile", arg="repeat")
        x = np.asarray(x)
        self(x)  # checks x, and warms the caches
        library = self._library
        calls = []  # (symbol, tensor arguments) of each kernel call, in order

        def instrument(func, symbol, before, ret, *args):  # noqa: ARG001 - the hook's fixed signature
            if before and library is not None and library.implements_function(symbol):
                calls.append((symbol, [a for a in args if isinstance(a, tvm.runtime.Tensor)]))
            return 0

        vm = relax.VirtualMachine(self._lib, tvm.cpu())
        vm.set_instrument(instrument)
        vm[choose_entry(self._entries, x.shape[0])](self._argument(x))
        rows = []
        for symbol, args in calls:
            timer = library.time_evaluator(symbol, tvm.cpu(), number=1, repeat=repeat)
            rows.append({"kernel": symbol, "shapes": [tuple(a.shape) for a in args],
                         "ms": 1e3 * float(timer(*args).median)})
        rows.sort(key=lambda row: -row["ms"])
        total_ms = 1e3 * _median_seconds(lambda: self(x), repeat)
        rows.append({"kernel": "(outside kernels)", "shapes": [],
                     "ms": max(0.0, total_ms - sum(row["ms"] for row in rows))})
        total_ms = max(total_ms, sum(row["ms"] for row in rows))  # kernels timed alone may add up to more
        for row in rows:
            row["share"] = row["ms"] / total_ms
        return Profile(rows, total_ms, int(x.shape[0]))

    def _check(self, x: np.ndarray) -> None:
        if x.dtype != self._dtype:
            raise DTypeError(f"got {x.dtype}, expected {self.input_dtype}: the model was exported for "
                             f"{self.input_dtype} (convert with x.astype({self.input_dtype!r}))", where="Predictor",
                             arg="x")
        shape = x.shape
        if (len(shape) != self._rank or shape[1:] != self._tail
                or (shape[0] < 1 if self._batch is None else shape[0] != self._batch)):
            shown = "(" + ", ".join("N" if w is None else str(w) for w in self.input_shape) + ")"
            raise ShapeError(f"got {shape}, expected {shown} with N >= 1", where="Predictor", arg="x")

    def _argument(self, x: np.ndarray, shape: tuple | None = None):
        """``x`` (reshaped to ``shape`` when given) as a TVM tensor: its own
        memory when it is C-contiguous and aligned as the module's kernels
        need, else a copy in the stage, an aligned buffer kept for the next
        input of the same shape."""
        if shape is not None and x.shape != shape:
            x = x.reshape(shape)
        arg = from_dlpack(x.__dlpack__(max_version=DLPACK_VERSION))
        if arg.data_ptr() % self._align == 0 and x.flags.c_contiguous:
            return arg
        if self._staged is None or self._staged[0].shape != x.shape:
            buf = np.empty(x.nbytes + ALIGN, np.uint8)
            start = -buf.ctypes.data % ALIGN
            view = buf[start:start + x.nbytes].view(x.dtype).reshape(x.shape)
            self._staged = view, from_dlpack(view)
        np.copyto(self._staged[0], x)
        return self._staged[1]

    @staticmethod
    def _check_out(out, result: np.ndarray) -> None:
        if not isinstance(out, np.ndarray) or out.dtype != result.dtype:
            got = out.dtype if isinstance(out, np.ndarray) else type(out).__name__
            raise DTypeError(f"got {got}, expected a numpy array of {result.dtype}", where="Predictor", arg="out")
        if out.shape != result.shape or not out.flags.c_contiguous or not out.flags.writeable:
            raise ShapeError(f"got a{'' if out.flags.writeable else ' read-only'}"
                             f"{'' if out.flags.c_contiguous else ' non-contiguous'} array of shape {out.shape}, "
                             f"expected a writable C-contiguous array of shape {result.shape}", where="Predictor",
                             arg="out")


def _median_seconds(call, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return float(np.median(times))
