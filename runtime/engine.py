"""A dependency engine in MXNet's style: push work that reads and writes
variables; it runs on a worker pool as soon as what it depends on is done.

>>> eng = Engine()
>>> a, b = eng.new_var("a"), eng.new_var("b")
>>> eng.push(lambda: fill(x), writes=[a])
>>> eng.push(lambda: use(x), reads=[a])          # after the write
>>> eng.push(lambda: other(y), reads=[b])        # concurrently with both
>>> eng.wait_for_var(a)                          # both ops on ``a`` are done

Guarantees (tested in ``tests/test_engine.py``):

* two pushes that share a variable, at least one of them writing it, run in
  push order; pushes that only read a variable run concurrently; anything
  else may run in parallel on the pool (one thread per core by default);
* ``push`` returns at once and is safe to call from several threads; a
  function may itself push more work;
* an exception in a pushed function does not stop the engine: every
  variable the function writes carries the error, later work reading or
  writing such a variable is skipped (its writes carry the error on), and
  the error is raised by the next ``wait_for_var`` on an affected variable
  and by the next ``wait_for_all``. A later push that only writes a variable
  (a fresh value) clears its error;
* ``delete_var(v)`` runs after everything pushed before it that touches
  ``v``; pushing to a deleted variable raises.

A variable stands for a piece of state (a tensor's memory, a file); the
engine never looks inside it.
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable

from ..errors import KilnError


class EngineError(KilnError):
    """Misuse of the engine (e.g. pushing to a deleted variable)."""


class Var:
    """A variable: ops on it are ordered by the engine. Create with ``new_var``."""

    __slots__ = ("_name", "_last_write", "_reads", "_error", "_deleted", "__weakref__")

    def __init__(self, name: str | None = None):
        self._name = name  # None: named by its identity, when a message needs it (most vars never do)
        self._last_write: _Op | None = None   # the last pushed writer not yet finished
        self._reads: list[_Op] = []           # readers pushed since that writer
        self._error: BaseException | None = None
        self._deleted = False

    @property
    def name(self) -> str:
        return self._name or f"v{id(self):x}"

    def __repr__(self) -> str:
        return f"<engine var {self.name}>"


WORK, WAIT, DELETE = "work", "wait", "delete"


class _Op:
    __slots__ = ("fn", "reads", "writes", "inputs", "kind", "is_async", "on_complete", "pending", "dependents",
                 "done", "name")

    def __init__(self, fn, reads, writes, inputs, kind, is_async, on_complete, name):
        self.fn, self.reads, self.writes = fn, reads, writes
        self.inputs = inputs  # every var whose value the op uses (reads, and read-writes)
        self.kind = kind      # WAIT ops only signal: they run whatever errors their vars carry
        self.is_async, self.on_complete, self.name = is_async, on_complete, name
        self.pending = 0
        self.dependents: list[_Op] = []
        self.done = False


def _released(op: _Op) -> bool:
    """One dependency of ``op`` is done (under the engine's lock): whether it is now ready."""
    op.pending -= 1
    return op.pending == 0


class Engine:
    """The dependency engine: ``workers`` threads (default: the usable cores);
    ``workers=0`` runs every push inline, in push order (strict serial execution)."""

    def __init__(self, workers: int | None = None):
        from ..config import usable_cores

        self.workers = usable_cores() if workers is None else workers
        self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="kiln-engine") if self.workers else None
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._running = 0          # pushed and not finished
        self._waiting = 0          # threads in wait_for_all
        self._errors: list[BaseException] = []

    # -- variables ------------------------------------------------------------------
    def new_var(self, name: str | None = None) -> Var:
        return Var(name)

    def delete_var(self, var: Var, on_delete: Callable[[], None] | None = None) -> None:
        """Retire ``var`` once everything pushed before that touches it is done
        (then run ``on_delete``, e.g. to free its memory)."""

        self._push(on_delete or (lambda: None), (), (var,), name=f"delete {var.name}", kind=DELETE)

    # -- pushing ----------------------------------------------------------------------
    def push(self, fn: Callable[[], None], reads: Iterable[Var] = (), writes: Iterable[Var] = (),
             name: str | None = None, inline: bool = False) -> None:
        """Run ``fn()`` once every earlier conflicting push is done; returns at once.

        ``inline=True`` runs it right here, in the pushing thread, when nothing
        it depends on is pending (else on the thread that finishes the last
        of them): for work that occupies every core by itself, such as a
        kernel on TVM's thread pool, or is too short to be worth a thread
        hand-off. A worker would only add a hand-off and take a core from
        the kernel. Other work (assembling the next batch) runs on the
        engine's worker threads, overlapping the pushing thread."""
        if type(reads) not in (list, tuple):  # iterated more than once below
            reads = tuple(reads)
        if type(writes) not in (list, tuple):
            writes = tuple(writes)
        name = name or getattr(fn, "__name__", "op")
        if not (inline and self._run_now(fn, reads, writes, name)):
            self._push(fn, reads, writes, name=name, inline=inline)

    def push_async(self, fn: Callable[[Callable[[BaseException | None], None]], None], reads: Iterable[Var] = (),
                   writes: Iterable[Var] = (), on_complete: Callable[[], None] | None = None,
                   name: str | None = None) -> None:
        """Like ``push``, for work that finishes on its own: ``fn(done)`` starts
        it and ``done()`` (or ``done(exc)``) must be called when it ends, from
        any thread; then ``on_complete()`` runs and dependents may start."""
        self._push(fn, reads, writes, is_async=True, on_complete=on_complete,
                   name=name or getattr(fn, "__name__", "op"))

    def _push(self, fn, reads, writes, *, name: str, kind: str = WORK, is_async: bool = False,
              on_complete=None, inline: bool = False) -> None:
        inputs = tuple(dict.fromkeys(reads))
        writes = tuple(dict.fromkeys(writes))
        reads = tuple(v for v in inputs if v not in writes) if writes else inputs  # a read-write orders as a write
        op = _Op(fn, reads, writes, inputs, kind, is_async, on_complete, name)
        with self._lock:
            if kind != WAIT:
                for v in reads + writes:
                    if v._deleted:
                        raise EngineError(f"variable {v.name} was deleted", arg="vars")
            if kind == DELETE:
                for v in writes:
                    v._deleted = True
            deps = []
            for v in reads:
                if v._last_write is not None:
                    deps.append(v._last_write)
                v._reads.append(op)
            for v in writes:
                if v._last_write is not None:
                    deps.append(v._last_write)
                deps.extend(v._reads)
                v._last_write, v._reads = op, []
            for dep in dict.fromkeys(deps) if len(deps) > 1 else deps:
                if not dep.done:
                    dep.dependents.append(op)
                    op.pending += 1
            self._running += 1
            ready = op.pending == 0
        if ready and inline:
            self._run(op)
        elif ready:
            self._start(op)

    def push_new(self, fn: Callable[[], None], reads: list | tuple, writes: list | tuple, name: str) -> None:
        """``push(fn, reads, writes, name, inline=True)`` where every var in
        ``writes`` was just made by ``new_var`` and is not yet known to any
        other code (an eager op's outputs): no other push can touch them
        while ``fn`` runs, so only the reads are checked and registered (a
        writer another thread pushes meanwhile waits for this read)."""
        if not self._run_now(fn, reads, writes, name, new=True):
            self._push(fn, reads, writes, name=name, inline=True)

    def _run_now(self, fn, reads, writes, name: str, new: bool = False) -> bool:
        """The inline path when nothing ``fn`` touches is pending or carries
        an error (an eager op's usual case): register it, run it here, retire
        it; False (nothing done) otherwise: ``_push`` and ``_run`` without
        their general cases, and ``_finish`` without those a clean inline run
        cannot have (an error, ``on_complete``). ``new``: ``writes`` are new
        vars (``push_new``), neither checked nor registered. (The lock is
        taken with acquire/release: ``with`` costs twice as much, a tenth of a
        microsecond each time, on a path every eager op takes.)"""
        lock = self._lock
        lock.acquire()
        try:
            for v in reads:
                if v._last_write is not None or v._error is not None or v._deleted:
                    return False
            if not new:
                for v in writes:
                    if v._last_write is not None or v._reads or v._deleted:
                        return False
                for v in reads:
                    if v in writes:  # a read-write orders as a write
                        reads = [r for r in reads if r not in writes]
                        break
            op = _Op(fn, reads, writes, reads, WORK, False, None, name)
            if not new:
                for v in writes:
                    v._last_write = op
            for v in reads:
                v._reads.append(op)
            self._running += 1
        finally:
            lock.release()
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised at the next wait
            self._finish(op, exc)
            return True
        lock.acquire()
        try:
            op.done = True
            if not new:
                for v in writes:
                    v._error = None
                    if v._last_write is op:
                        v._last_write = None
            for v in reads:
                pending = v._reads
                if pending and pending[-1] is op:
                    pending.pop()
                elif op in pending:
                    pending.remove(op)
            ready = [dep for dep in op.dependents if _released(dep)] if op.dependents else ()
            op.fn = None
            self._running -= 1
            if not self._running and self._waiting:
                self._idle.notify_all()
        finally:
            lock.release()
        for dep in ready:  # pushed by another thread while fn ran
            self._start(dep)
        return True

    # -- running ----------------------------------------------------------------------
    def _start(self, op: _Op) -> None:
        if self._pool is None:
            self._run(op)
        else:
            self._pool.submit(self._run, op)

    def _run(self, op: _Op) -> None:
        if op.kind != WAIT:
            for v in op.inputs:
                if v._error is not None:  # an input carries an error: skip, pass the error on
                    self._finish(op, v._error, ran=False)
                    return
        if not op.is_async:
            try:
                op.fn()
            except BaseException as exc:  # noqa: BLE001 - re-raised at the next wait
                self._finish(op, exc)
                return
            self._finish(op, None)
            return
        fired = threading.Event()

        def done(exc: BaseException | None = None) -> None:
            if fired.is_set():
                return
            fired.set()
            self._finish(op, exc)

        try:
            op.fn(done)
        except BaseException as exc:  # noqa: BLE001
            done(exc)

    def _finish(self, op: _Op, exc: BaseException | None, ran: bool = True) -> None:
        if op.on_complete is not None and ran and exc is None:
            try:
                op.on_complete()
            except BaseException as err:  # noqa: BLE001
                exc = err
        ready = []
        with self._lock:
            op.done = True
            for v in op.writes:
                v._error = exc
                if v._last_write is op:
                    v._last_write = None
            for v in op.reads:
                if op in v._reads:
                    v._reads.remove(op)
            if exc is not None and ran:
                self._errors.append(exc)
            for dep in op.dependents:
                dep.pending -= 1
                if dep.pending == 0:
                    ready.append(dep)
            op.dependents = []
            op.fn = op.on_complete = None  # drop closures (and the memory they hold) at once
            self._running -= 1
            if not self._running and self._waiting:  # wait_for_all waits for this
                self._idle.notify_all()
        for dep in ready:
            self._start(dep)

    # -- waiting ----------------------------------------------------------------------
    def wait_for_var(self, var: Var) -> None:
        """Block until every op pushed so far that touches ``var`` is done;
        raise the error ``var`` carries, if any."""
        with self._lock:
            idle = var._last_write is None
        if not idle:  # a reader of ``var`` that is never skipped: it only signals
            event = threading.Event()
            self._push(event.set, (var,), (), name=f"wait {var.name}", kind=WAIT, inline=True)
            event.wait()
        if var._error is not None:
            raise var._error

    def wait_for_all(self) -> None:
        """Block until everything pushed so far is done; raise the first error
        raised since the last ``wait_for_all`` (the others are dropped)."""
        with self._lock:
            self._waiting += 1
            try:
                while self._running:
                    self._idle.wait()
            finally:
                self._waiting -= 1
            errors, self._errors = self._errors, []
        if errors:
            raise errors[0]

    def shutdown(self) -> None:
        self.wait_for_all()
        if self._pool is not None:
            self._pool.shutdown(wait=True)


_default: Engine | None = None
_default_lock = threading.Lock()


def default() -> Engine:
    """The process's engine, created on first use (``KILN_ENGINE=serial``
    makes it run every push inline: see ``kiln.config``)."""
    global _default
    if _default is not None:  # every eager op asks: no lock once it exists
        return _default
    with _default_lock:
        if _default is None:
            from ..config import engine_workers, keep_freed_memory, keep_memory

            if keep_memory():  # each op allocates its outputs: reuse freed memory, no fresh pages per step
                keep_freed_memory()
            _default = Engine(engine_workers())
        return _default


__all__ = ["Engine", "EngineError", "Var", "default"]
