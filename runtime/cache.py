"""The kernel cache: memory, then disk, then compile.

Key: the workload (op, attrs, shapes, dtypes), target and config, plus the kiln and TVM
versions, a fingerprint of the op and schedule code and the entry format,
hashed with SHA-256. On disk each kernel is one shared library,
``<cache_dir>/kernels/<key hash>.<content hash>.so``:

* written atomically: exported to a temporary file in the same directory,
  fsynced, then renamed, so a reader never sees a half-written file and two
  processes writing the same kernel both leave a valid one;
* content-hashed: the name carries the SHA-256 of the bytes, checked before
  loading, so a truncated or corrupt file is detected, removed and rebuilt;
* bound to its key: the library ends with its key (the loader ignores bytes
  after the ELF image), so another valid kernel's file under this key's name —
  which would load and then fail on every call — is detected and rebuilt too.

Loading an entry runs native code, so the directories kiln creates are mode
0700; an existing one is left as it is, with a warning if others may write to
it.
"""
from __future__ import annotations

import functools
import hashlib
import logging
import os
import stat
import tempfile
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import tvm

from .. import config as kiln_config
from ..errors import CacheError
from ..te.workload import Workload, digest
from ..version import __version__ as VERSION
from .link import write_library

log = logging.getLogger("kiln.cache")
ENTRY_FORMAT = 2  # 2: the key is appended to the library
KEY_TAG = b"\0kiln-kernel-key:"


@dataclass
class CacheStats:
    compiled: int = 0
    memory_hits: int = 0
    disk_hits: int = 0
    disk_writes: int = 0
    corrupt: int = 0
    errors: list = field(default_factory=list)


stats = CacheStats()
_memory: dict[str, object] = {}
_lock = threading.Lock()


@functools.lru_cache(maxsize=None)
def code_fingerprint() -> str:
    """Hash of the code that decides what a kernel computes and how it is
    scheduled (te/, schedules/, runtime/lower.py): editing an op or a template
    invalidates its cached kernels instead of serving stale ones."""
    root = Path(__file__).resolve().parent.parent
    files = sorted([*root.glob("te/**/*.py"), *root.glob("schedules/**/*.py"), root / "runtime" / "lower.py"])
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def key_of(workload: Workload, target_key: str, config_key: str) -> str:
    """SHA-256 of the canonical description of a kernel: the workload's JSON,
    the target, the config and what produced the code."""
    return digest({**workload.json, "target": target_key, "config": config_key, "kiln": VERSION,
                   "entry": ENTRY_FORMAT, "code": code_fingerprint(), "tvm": tvm.__version__})


def kernel_dir() -> Path:
    """``<cache_dir>/kernels``, creating the missing folders with mode 0700."""
    path = kiln_config.cache_dir() / "kernels"
    try:
        make_private_dirs(path)
    except OSError as exc:
        raise CacheError(f"cannot use cache directory {path}: {exc}", arg="KILN_CACHE_DIR") from exc
    return path


_warned: set[str] = set()


def make_private_dirs(path: Path) -> None:
    """Create ``path`` and its missing parents with mode 0700; folders that
    already exist keep their mode (``KILN_CACHE_DIR=/tmp`` must not change
    /tmp), with one warning per process for a world-writable one."""
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:  # another process made it first: not ours to chmod
            continue
        os.chmod(folder, 0o700)  # mkdir's mode is reduced by the umask
    for folder in (path.parent, path):
        if folder not in missing and folder.stat().st_mode & stat.S_IWOTH and str(folder) not in _warned:
            _warned.add(str(folder))
            warnings.warn(f"kiln: the kernel cache folder {folder} is writable by every user, who could place code "
                          "there that kiln loads; set KILN_CACHE_DIR to a private directory", RuntimeWarning,
                          stacklevel=3)


def get(key: str, load, build):
    """The kernel for ``key``: from memory, else ``load(module)`` of a valid disk
    entry, else ``build()`` — which returns ``(kernel, exportable)``, the
    latter None for kernels that cannot be stored (CUDA source) — and store.
    Raises ``ConfigError`` for an invalid setting (``kiln.config.check``)."""
    kiln_config.check()
    with _lock:
        if key in _memory:
            stats.memory_hits += 1
            return _memory[key]
    kernel = None
    if kiln_config.disk_cache_enabled():
        module = _read(key)
        if module is not None:
            stats.disk_hits += 1
            kernel = load(module)
    if kernel is None:
        kernel, exportable = build()
        stats.compiled += 1
        if exportable is not None and kiln_config.disk_cache_enabled():
            stored = _write(key, exportable)
            if stored is not None:
                # run the stored library: loading it is cheaper than JIT-compiling the in-memory module again
                kernel.module = _load(stored) or kernel.module
    with _lock:
        return _memory.setdefault(key, kernel)


def _read(key: str):
    try:
        folder = kernel_dir()
    except CacheError as exc:  # an unusable cache dir degrades to memory only
        _degrade(exc)
        return None
    for path in sorted(folder.glob(f"{key}.*.so")):
        digest = path.name.split(".")[1]
        try:
            data = path.read_bytes()
        except OSError:
            continue
        problem = ("is corrupt or truncated" if hashlib.sha256(data).hexdigest()[:32] != digest
                   else "holds another kernel" if not data.endswith(KEY_TAG + key.encode()) else None)
        if problem:
            stats.corrupt += 1
            log.warning("kernel cache entry %s %s; rebuilding it", path.name, problem)
            _unlink(path)
            continue
        module = _load(path)
        if module is not None:
            return module
        stats.corrupt += 1  # a valid hash but unloadable: rebuild
        _unlink(path)
    return None


def _degrade(exc: Exception) -> None:
    stats.errors.append(str(exc))
    if len(stats.errors) == 1:
        log.warning("%s; compiled kernels are kept in memory only", exc)


def _load(path: Path):
    try:
        return tvm.runtime.load_module(str(path))
    except Exception as exc:  # noqa: BLE001 - reported; the caller rebuilds or keeps what it has
        log.warning("kernel cache entry %s does not load (%s)", path.name, exc)
        return None


def _write(key: str, exportable) -> Path | None:
    """Export to a temp file, fsync, rename to its content-hashed name (returned;
    None when it could not be written)."""
    try:
        folder = kernel_dir()
        fd, tmp = tempfile.mkstemp(prefix=f".{key[:16]}-", suffix=".so", dir=folder)
        os.close(fd)
        try:
            write_library(exportable, tmp)
            with open(tmp, "ab") as f:
                f.write(KEY_TAG + key.encode())
                f.flush()
                os.fsync(f.fileno())
            with open(tmp, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()[:32]
            final = folder / f"{key}.{digest}.so"
            os.replace(tmp, final)
            stats.disk_writes += 1
            return final
        finally:
            _unlink(Path(tmp))
    except Exception as exc:  # noqa: BLE001 - the kernel still works from memory
        _degrade(CacheError(f"could not write kernel cache entry: {exc}"))
        return None


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning("could not remove %s: %s", path, exc)


def clear_memory() -> None:
    """Forget in-memory kernels (the disk cache stays)."""
    with _lock:
        _memory.clear()
