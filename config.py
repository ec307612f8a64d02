"""kiln's configuration: the one place that reads the environment.

``KILN_CACHE_DIR``    where compiled kernels (and, by default, tuning records)
                      are kept: a directory, or a path kiln may create
                      (default: ``$XDG_CACHE_HOME/kiln`` or ``~/.cache/kiln``).
``KILN_DISK_CACHE``   ``1``/``true``/``yes``/``on`` (default) or
                      ``0``/``false``/``no``/``off``: keep compiled kernels on
                      disk, or in memory only.
``KILN_NUM_THREADS``  threads of TVM's CPU pool, a whole number from 1 to
                      ``max_threads()`` = 4 x the cores this process may run on
                      (more only adds switching between threads; 100,000 would
                      start 100,000 threads). Default: the usable cores. When it
                      is unset, ``TVM_NUM_THREADS`` is read under the same rule.
                      TVM's own default is half the hardware threads — one on a
                      2-core machine — so kiln sets ``TVM_NUM_THREADS`` before
                      TVM starts its pool, and ``TVM_EXCLUDE_WORKER0=0``
                      unless it is set (``configure_thread_pool`` says why).
``KILN_ENGINE``       ``serial`` runs the dependency engine's work inline, in
                      push order (for debugging and comparison); a whole number
                      from 1 to ``max_threads()`` sets its worker threads
                      (default: the usable cores).
``KILN_KEEP_MEMORY``  on (default) or off, spelled as for ``KILN_DISK_CACHE``:
                      when the engine starts (eager
                      ``kiln.nn`` work), tell glibc's allocator to keep freed
                      memory for reuse (``keep_freed_memory``); ``0`` leaves
                      the process's allocator as it was.
``KILN_WINOGRAD`` on (default) or off, spelled as for ``KILN_DISK_CACHE``:
                      3x3 stride-1 convolutions with 16 or more input
                      channels, and their data gradients, run as Winograd
                      convolutions in eager ``kiln.nn`` and in compiled steps
                      where the batch holds at least as many tiles as output
                      channels (``kiln/strategy/conv2d.py``; rounding of about
                      1e-6 to 1e-5 of the output where the direct kernel's is
                      1e-6); off keeps them direct.
``KILN_CPU``          the LLVM name of the CPU that kernels are built for
                      (``znver3``, ``skylake-avx512``, ``x86-64-v3``; default:
                      the host's, detected). Kernels built for a CPU with
                      features the host lacks compile but cannot run here:
                      for building on one machine what runs on another, and
                      for running the tests as another machine kind would
                      (``KILN_CPU=znver3 pytest`` on an AVX-512 host builds
                      and runs AVX2 code). Checked against LLVM's CPU list
                      when the first CPU target is made.

An empty variable counts as unset. A value outside these rules raises
``kiln.errors.ConfigError``, which names the variable, the value and what is
expected. When that happens:

* ``import kiln`` never fails on a bad value: an import that raises breaks
  every tool that merely imports kiln (test collection, editors, ``--help``),
  and it could not be reported as a ``kiln`` command error. The import sizes
  the thread pool only from a valid value and otherwise leaves it alone.
* The value is refused at first use, before any work: the ``kiln`` command
  checks every variable before it runs a subcommand (``kiln: error: ...``,
  exit status 2); in Python, ``kiln.build`` (through the kernel cache) and
  ``kiln.runtime.Predictor`` call ``check()``, and the engine reads
  ``KILN_ENGINE`` when it starts. A bad value is never silently replaced by
  the default.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from .errors import ConfigError

TRUE = ("1", "true", "yes", "on")
FALSE = ("0", "false", "no", "off")
# every variable read here: check() revalidates when one of them changes
VARIABLES = ("KILN_CACHE_DIR", "KILN_DISK_CACHE", "KILN_NUM_THREADS", "TVM_NUM_THREADS", "KILN_ENGINE",
             "KILN_KEEP_MEMORY", "KILN_WINOGRAD", "KILN_CPU", "XDG_CACHE_HOME", "HOME")
#: glibc mallopt parameters: freed blocks below this stay in the heap (the largest the allocator allows on
#: 64-bit), and the heap's free top is returned to the system only above the trim threshold
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD, TRIM_THRESHOLD = 32 << 20, 256 << 20


def _get(name: str) -> str | None:
    value = os.environ.get(name, "").strip()
    return value or None


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def max_threads() -> int:
    """The most threads a pool may be given: 4 x the usable cores."""
    return 4 * usable_cores()


def _thread_count(name: str, value: str, extra: str = "") -> int:
    limit = max_threads()
    if not re.fullmatch(r"\d+", value) or not 1 <= int(value) <= limit:
        raise ConfigError(name, value, f"{extra}a whole number of threads from 1 to {limit} "
                                       f"(4 x the {usable_cores()} usable cores)")
    return int(value)


def num_threads() -> int:
    """Threads of TVM's CPU pool: ``KILN_NUM_THREADS``, else ``TVM_NUM_THREADS``, else the usable cores."""
    for name in ("KILN_NUM_THREADS", "TVM_NUM_THREADS"):
        value = _get(name)
        if value is not None:
            return _thread_count(name, value)
    return usable_cores()


def configure_thread_pool() -> int | None:
    """Size TVM's CPU thread pool to the cores, before the pool first starts,
    and run every share of a parallel kernel on TVM's pinned workers
    (``TVM_EXCLUDE_WORKER0=0``, unless it is set).

    By default TVM pins each worker to a core of its own and lets the calling
    thread do the first share, unpinned; when the OS puts the caller on a
    worker's core, the two share it, and an exported model's call slows by
    up to 3x for as long as it stays there (a batch-1 784-512-10 MLP: 0.018
    or 0.05 ms by where the caller landed; unpinned workers did the same).
    Measured with ``../shared/checks/infer_vs_ort.py``, three runs each: worst
    row 1.04-1.14x ONNX Runtime with this setting, 1.11-1.79x with unpinned
    workers; training steps (``train_vs_torch.py``) within the run-to-run
    spread either way.

    The setting has a cost where another busy process shares the cores: the
    calling thread and the worker both spin at a parallel kernel's end, so
    with more runnable threads than cores a call can wait out the
    scheduler's time slice (``python benchmarks/contention.py``: the digits
    CNN exported, batch 16, beside one busy loop on 2 cores: 4.0 ms a call
    instead of 0.05; ONNX Runtime 0.05-0.09). ``TVM_EXCLUDE_WORKER0=1``
    (0.087 ms there; the check's worst row 1.79-1.82x ONNX Runtime on a
    quiet machine instead of 0.96-1.3x) or ``KILN_NUM_THREADS=1`` (0.058
    ms, alone or loaded) avoid the stall; unpinning (``TVM_BIND_THREADS=0``)
    does not (4.0 ms in two runs of three). A machine shared with busy
    processes should use one of the two.

    TVM reads ``TVM_NUM_THREADS`` lazily, when the first parallel kernel runs,
    so setting it here (at ``import kiln``) is early enough. Returns the count,
    or None when the setting is invalid (then ``check()`` reports it at first use).
    """
    try:
        n = num_threads()
    except ConfigError:
        return None
    os.environ["TVM_NUM_THREADS"] = str(n)
    if _get("TVM_EXCLUDE_WORKER0") is None:
        os.environ["TVM_EXCLUDE_WORKER0"] = "0"
    return n


def engine_workers() -> int:
    """Worker threads of the dependency engine; 0 means serial, inline execution."""
    value = _get("KILN_ENGINE")
    if value is None:
        return usable_cores()
    if value.lower() == "serial":
        return 0
    return _thread_count("KILN_ENGINE", value, extra="'serial' or ")


def _switch(name: str) -> bool:
    """An on/off variable, on when unset: one of ``TRUE`` or ``FALSE``."""
    value = _get(name)
    if value is None or value.lower() in TRUE:
        return True
    if value.lower() in FALSE:
        return False
    raise ConfigError(name, value, f"one of {', '.join(TRUE)} (on) or {', '.join(FALSE)} (off)")


def winograd() -> bool:
    """``KILN_WINOGRAD``: whether eager ops and compiled steps run 3x3 stride-1 convolutions as Winograd."""
    return _switch("KILN_WINOGRAD")


def keep_memory() -> bool:
    """``KILN_KEEP_MEMORY``: whether the engine tunes the allocator (``keep_freed_memory``)."""
    return _switch("KILN_KEEP_MEMORY")


def keep_freed_memory() -> bool:
    """Make glibc keep freed blocks up to 32 MB in the heap for the next
    allocation instead of unmapping them (returns whether it applied: glibc
    only). Eager training allocates every op's output afresh; by default
    glibc maps a large block anew for each, so each step zero-fills fresh
    pages: about 1,000 page faults per step of the zoo CNN at batch 64,
    4-9% of its step time. The heap keeps up to 256 MB free before it
    returns memory to the system."""
    import ctypes

    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))


def cache_dir() -> Path:
    """The cache root: ``KILN_CACHE_DIR``, else ``$XDG_CACHE_HOME/kiln``, else ``~/.cache/kiln``.

    Raises ``ConfigError`` when ``KILN_CACHE_DIR`` (or a folder above it) is an
    existing file. Nothing is created here (``kiln.runtime.cache`` does that).
    """
    root = _get("KILN_CACHE_DIR")
    if root is not None:
        path = Path(root).expanduser().absolute()
        blocker = next((p for p in (path, *path.parents) if p.exists()), None)
        if blocker is not None and not blocker.is_dir():
            where = "" if blocker == path else f" ({blocker} is a file)"
            raise ConfigError("KILN_CACHE_DIR", root, f"a directory, or a path where one can be created{where}")
        return path
    xdg = _get("XDG_CACHE_HOME")
    if xdg is not None and Path(xdg).is_absolute():  # the XDG spec says to ignore a relative one
        return Path(xdg) / "kiln"
    try:
        return Path.home() / ".cache" / "kiln"
    except RuntimeError as exc:  # no HOME and no passwd entry
        raise ConfigError("KILN_CACHE_DIR", "", "a directory (no home directory to default to)") from exc


def cpu_name() -> str | None:
    """``KILN_CPU``: the CPU name kernels are built for, or None for the host's.

    Only its spelling is checked here (LLVM's list of CPU names is TVM's to
    read: ``kiln.runtime.device.cpu`` checks the name against it)."""
    value = _get("KILN_CPU")
    if value is not None and not re.fullmatch(r"[a-z0-9][a-z0-9_.-]*", value):
        raise ConfigError("KILN_CPU", value, "an LLVM CPU name such as znver3, skylake-avx512 or x86-64-v3")
    return value


def records_path() -> Path:
    """kiln's tuning records file: ``tuning/records.jsonl`` under ``cache_dir()``."""
    return cache_dir() / "tuning" / "records.jsonl"


def disk_cache_enabled() -> bool:
    """``KILN_DISK_CACHE``: keep compiled kernels on disk (the default) or in memory only."""
    return _switch("KILN_DISK_CACHE")


_checked: tuple | None = None  # the values last found valid


def check() -> None:
    """Validate every variable kiln reads; raise ``ConfigError`` for the first bad one.

    Cheap when nothing changed since the last successful check (it runs on
    every ``kiln.build``).
    """
    global _checked
    snapshot = tuple(os.environ.get(name) for name in VARIABLES)
    if snapshot == _checked:
        return
    num_threads()
    engine_workers()
    keep_memory()
    winograd()
    disk_cache_enabled()
    cpu_name()
    cache_dir()
    _checked = snapshot
