"""kiln's configuration: the one place that reads the environment.

``KILN_CACHE_DIR``    where compiled kernels are cached on disk
                      (default: ``$XDG_CACHE_HOME/kiln`` or ``~/.cache/kiln``).
``KILN_DISK_CACHE``   set to ``0`` to disable the on-disk kernel cache.
``KILN_NUM_THREADS``  threads of TVM's CPU pool (default: the cores this process
                      may run on). TVM's own default is half the hardware
                      threads — one thread on a 2-core machine — so kiln sets
                      ``TVM_NUM_THREADS`` before TVM starts its pool.
``KILN_ENGINE``       ``serial`` runs the dependency engine's work inline, in
                      push order (for debugging and comparison); a number sets
                      its worker threads (default: the usable cores).
"""
from __future__ import annotations

import os
from pathlib import Path


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def num_threads() -> int:
    value = os.environ.get("KILN_NUM_THREADS") or os.environ.get("TVM_NUM_THREADS")
    if value:
        try:
            return max(1, int(value))
        except ValueError:
            pass
    return usable_cores()


def configure_thread_pool() -> int:
    """Size TVM's CPU thread pool to the cores, before the pool first starts.

    TVM reads ``TVM_NUM_THREADS`` lazily, when the first parallel kernel runs,
    so setting it here (at ``import kiln``) is early enough.
    """
    n = num_threads()
    os.environ["TVM_NUM_THREADS"] = str(n)
    return n


def engine_workers() -> int:
    """Worker threads of the dependency engine; 0 means serial, inline execution."""
    value = os.environ.get("KILN_ENGINE", "").strip().lower()
    if value == "serial":
        return 0
    return max(1, int(value)) if value.isdigit() else usable_cores()


def cache_dir() -> Path:
    root = os.environ.get("KILN_CACHE_DIR")
    if root:
        return Path(root).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "kiln"


def disk_cache_enabled() -> bool:
    return os.environ.get("KILN_DISK_CACHE", "1").strip().lower() not in ("0", "false", "no", "off")
