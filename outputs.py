"""Output files: checked before the work that produces them, written atomically.

A long job (``kiln train``, ``kiln export``) calls ``check_output_path`` on
every path it will write before it starts, so a typo costs seconds, not a
trained model. ``atomic_path`` writes a file the crash-safe way: to a
temporary file beside it, fsynced, renamed over the target (``os.replace``),
and the rename fsynced in its folder, so a reader sees the old file or the
complete new one, never a torn one.
"""
from __future__ import annotations

import contextlib
import functools
import os
import tempfile
from pathlib import Path
from typing import Iterator

from .errors import OutputError

PLOT_HINT = "pip install -e '.[plot]'"


def check_output_path(path, arg: str) -> Path:
    """``path`` as a Path, after checking that a file can be written there.

    Missing parent folders are allowed (the writers create them), but the
    nearest existing one must be a folder kiln can create files in.

    Parameters
    ----------
    path : str or Path
    arg : str
        The argument that named it (``"--save"``), for the error message.

    Raises
    ------
    OutputError
        ``path`` is empty, a folder or a special file (a device, a pipe), or
        its folder cannot be written.
    """
    if not str(path).strip():
        raise OutputError("got an empty path, expected a file path", arg=arg)
    target = Path(path).expanduser()
    if target.is_dir():
        raise OutputError(f"{target} is a directory, expected a file path (e.g. {target / 'model'})", arg=arg)
    if target.exists() and not target.is_file():
        raise OutputError(f"{target} exists and is not a regular file; kiln replaces the files it writes",
                          arg=arg)
    folder = target.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise OutputError(f"cannot create {target}: {folder} is a file, not a folder", arg=arg)
    try:  # os.access says yes to root on a read-only mount: try the real thing
        fd, probe = tempfile.mkstemp(prefix=".kiln-probe-", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise OutputError(f"cannot write {target}: folder {folder} is not writable ({exc.strerror})",
                          arg=arg) from None
    return target


@contextlib.contextmanager
def atomic_path(path, suffix: str = "") -> Iterator[str]:
    """Yield a temporary file name beside ``path``; when the block ends without
    an exception the file is fsynced and renamed to ``path``, otherwise removed.

    Raises
    ------
    OutputError
        The file could not be created, written or renamed (a full disk, a
        read-only folder, ``path`` a directory).
    """
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", suffix=suffix, dir=path.parent)
        os.close(fd)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes it 0600; a written file gets the usual mode
        yield tmp
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_folder(path.parent)
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from exc
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


@functools.lru_cache(maxsize=None)
def _umask() -> int:
    """The process umask (read once: reading it means setting it)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _fsync_folder(folder: Path) -> None:
    """Make a rename in ``folder`` durable (a no-op where folders cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def check_plot_path(path, arg: str = "--plot") -> Path:
    """``check_output_path``, and that matplotlib is installed and writes the
    file type ``path``'s suffix names: a plot asked for is checked before the
    work whose results it draws."""
    try:
        from matplotlib.backend_bases import FigureCanvasBase
    except ImportError:
        raise OutputError(f"writing a plot needs matplotlib, which is not installed: {PLOT_HINT}", arg=arg) from None
    kinds = FigureCanvasBase.get_supported_filetypes()
    if Path(path).suffix.lstrip(".").lower() not in kinds:
        raise OutputError(f"got {str(path)!r}, expected a file name ending in one of "
                          f"{', '.join('.' + k for k in sorted(kinds))}", arg=arg)
    return check_output_path(path, arg)
