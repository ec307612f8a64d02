"""Tuning records: one JSON line per measurement, appended, never rewritten.

A line holds the task (op, attrs, shapes, dtypes, target), the config, the
result (per-repeat seconds, median/min/max, GFLOPS and GB/s) or the error, and where it
came from (tuner, trial, kiln and TVM versions, timestamp). No pickle: a
record is plain JSON that any tool can read.

Crash safety:

* ``append`` writes a whole batch with one ``write`` on a file opened with
  ``O_APPEND``, under an exclusive ``flock``, then fsyncs: two processes
  appending to one file never interleave bytes within a line, and a killed
  process loses at most the batch it was writing.
* a torn last line (a crash mid-write) is terminated before the next append,
  so it never swallows a good record; ``load`` skips torn or corrupt lines
  with a warning.

``kiln.build`` asks ``best_config`` for a task's best measured config before
it falls back to the template's defaults (the package wires it in as a
config source of the runtime); it reads the default records file
(``<cache dir>/tuning/records.jsonl``) and any file passed to ``apply``.
"""
from __future__ import annotations

import datetime
import fcntl
import json
import os
import threading
import warnings
from pathlib import Path
from typing import Iterable

import tvm

from .. import config as kiln_config
from ..errors import CacheError
from ..schedules.config import config_key
from ..te.workload import Workload, digest
from ..version import __version__ as VERSION

FORMAT = 1
_applied: list[Path] = []
_index: dict[Path, tuple[tuple, dict]] = {}
_lock = threading.Lock()
_warned: set[tuple] = set()  # (path, size, bad lines) of the files whose torn lines were reported


def default_path() -> Path:
    return kiln_config.records_path()


def path_of(records) -> Path:
    """The records file a ``records=`` argument names: kiln's default file when none is given."""
    return Path(records) if records else default_path()


def task_json(workload: Workload, target_key: str) -> dict:
    """A record's task: the workload's JSON and the target."""
    return {**workload.json, "target": target_key}


def task_key(task: dict) -> str:
    """A short stable hash of a task's JSON (op, attrs, shapes, dtypes, target)."""
    return digest(task)[:20]


def make_record(task: dict, config: dict, result: dict | None = None, error: dict | None = None,
                **info) -> dict:
    """A record line: ``result`` (seconds, GFLOPS) or ``error`` (kind, message)."""
    return {"format": FORMAT, "task": task, "task_key": task_key(task), "config": config,
            "result": result, "error": error, "kiln": VERSION, "tvm": tvm.__version__,
            "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), **info}


def append(path, records: Iterable[dict]) -> None:
    """Append a batch of records as one atomic, locked, fsynced write."""
    data = "".join(json.dumps(r, sort_keys=True, separators=(",", ":")) + "\n" for r in records).encode()
    if not data:
        return
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
    except OSError as exc:
        raise CacheError(f"cannot open records file {path}: {exc}", arg="records") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":  # a torn line from a crash: end it
            data = b"\n" + data
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    except OSError as exc:
        raise CacheError(f"cannot append to records file {path}: {exc}", arg="records") from exc
    finally:
        os.close(fd)  # releases the lock


def load(path, task_key_: str | None = None) -> list[dict]:
    """The valid records of a file (of one task if ``task_key_`` is given);
    torn or corrupt lines are skipped with a warning (one per file as it
    stands, however often it is read). A missing file is empty."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise CacheError(f"cannot read records file {path}: {exc}", arg="records") from exc
    out, bad = [], []
    for number, line in enumerate(raw.split(b"\n"), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            if not (isinstance(rec, dict) and isinstance(rec.get("config"), dict) and "task_key" in rec
                    and isinstance(rec.get("task"), dict)):
                raise ValueError("not a record")
        except ValueError:
            bad.append(number)
            continue
        if task_key_ is None or rec["task_key"] == task_key_:
            out.append(rec)
    if bad:  # once per file as it stands: a tune reads its records file from several places
        seen = (str(path), len(raw), tuple(bad))
        with _lock:
            fresh = seen not in _warned
            _warned.add(seen)
        if fresh:
            warnings.warn(f"{path}: skipped {len(bad)} torn or corrupt record line(s) (line "
                          f"{', '.join(map(str, bad[:5]))}{'...' if len(bad) > 5 else ''})", RuntimeWarning,
                          stacklevel=2)
    return out


def is_ok(rec: dict) -> bool:
    res = rec.get("result")
    return rec.get("error") is None and isinstance(res, dict) and isinstance(res.get("median_s"), (int, float))


def score(rec: dict) -> float:
    """What tuners maximize: speed, 1 / median seconds (0 for a failed config).
    Time, not GFLOPS: a memory-bound op does no arithmetic worth counting."""
    return 1.0 / rec["result"]["median_s"] if is_ok(rec) and rec["result"]["median_s"] > 0 else 0.0


def is_confirmed(rec: dict) -> bool:
    """A record of the re-timing that ends a tune (``tune.confirm``): the
    top configs timed again, interleaved, rather than a trial."""
    return rec.get("confirmed") is True


def best(records: Iterable[dict]) -> dict | None:
    """The successful record with the lowest median time, or None; among the
    confirmed records when the last confirmation (in file order) came after
    every successful trial (a trial's single timing can be a lucky one, the
    re-timing ranks the top configs in one sitting), less those that did
    not beat the run's first config in most turns of it (``beats_first``
    False: ``tune._against``), else among them all: trials measured since,
    by a run that did not confirm, are not ignored."""
    ok = [r for r in records if is_ok(r)]
    last = max((i for i, r in enumerate(ok) if is_confirmed(r)), default=None)
    current = last is not None and all(is_confirmed(r) for r in ok[last:])
    pool = [r for r in ok if is_confirmed(r) and r.get("beats_first") is not False] if current else ok
    return min(pool, key=lambda r: r["result"]["median_s"]) if pool else None


def baseline(records: Iterable[dict], config: dict) -> dict | None:
    """The successful record of ``config`` (a run's first, the config it is
    measured against): its latest confirmation, timed beside the best, when
    there is one, else its first trial; None when it has none."""
    key = config_key(config)
    found = [r for r in records if is_ok(r) and config_key(r["config"]) == key]
    return next((r for r in reversed(found) if is_confirmed(r)), found[0] if found else None)


def prepare(path) -> None:
    """Create ``path`` (and its folders) if missing and check that it can be
    appended to: a bad records path fails before tuning, not after the first
    measured batch. Raises ``CacheError``."""
    path = Path(path)
    if path.is_dir():
        raise CacheError(f"records file {path} is a directory, expected a file path", arg="records")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600))
    except OSError as exc:
        raise CacheError(f"cannot write records file {path}: {exc.strerror or exc}", arg="records") from exc


def apply(path) -> None:
    """Use the best configs in ``path`` (in addition to the default records).
    Raises ``CacheError`` for a missing or unreadable file, or one with lines
    but no valid record (not a records file)."""
    path = Path(path)
    if not path.is_file():
        raise CacheError(f"records file {path} does not exist" if not path.exists() else
                         f"records file {path} is not a file", arg="records")
    try:
        with path.open("rb") as f:
            has_lines = bool(f.read(1 << 16).strip())
    except OSError as exc:
        raise CacheError(f"cannot read records file {path}: {exc}", arg="records") from exc
    with warnings.catch_warnings(record=True) as skipped:
        warnings.simplefilter("always")
        valid = load(path)
    if has_lines and not valid:
        raise CacheError(f"{path} holds no valid tuning record: not a records file written by kiln tune",
                         arg="records")
    for w in skipped:  # some lines were torn: say so, once the file is known to be a records file
        warnings.warn(w.message, w.category, stacklevel=2)
    with _lock:
        if path not in _applied:
            _applied.append(path)


def best_config(task: dict) -> dict | None:
    """The best measured config of a task over the applied and default records."""
    key, found = task_key(task), None
    for path in [*_applied, default_path()]:
        entry = _indexed(path).get(key)
        if entry and (found is None or entry[0] < found[0]):
            found = entry
    return dict(found[1]) if found else None


def batch_sizes(ops, target_key: str) -> set[int]:
    """The leading dims of the first input of the tasks of ``ops`` (op
    names) on ``target_key`` that the applied and default records tuned: the
    batch sizes a model made of those ops may have been tuned at."""
    ops, found = set(ops), set()
    for path in [*_applied, default_path()]:
        for _, _, task in _indexed(path).values():
            shapes = task.get("shapes") or [[]]
            if task.get("op") in ops and task.get("target") == target_key and shapes[0] \
                    and type(shapes[0][0]) is int and shapes[0][0] > 0:
                found.add(shapes[0][0])
    return found


def _indexed(path: Path) -> dict:
    """task key -> (median seconds, config, task) of the best record of each
    task in one file, re-read when it changes."""
    try:
        st = path.stat()
    except OSError:
        return {}
    stamp = (st.st_mtime_ns, st.st_size)
    with _lock:
        cached = _index.get(path)
        if cached and cached[0] == stamp:
            return cached[1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # reported when the user loads the file, not on every build
        recs = load(path)
    by_task: dict[str, list] = {}
    for rec in recs:
        by_task.setdefault(rec["task_key"], []).append(rec)
    index: dict[str, tuple] = {}
    for key, task_recs in by_task.items():
        found = best(task_recs)
        if found is not None:
            index[key] = (found["result"]["median_s"], found["config"], found["task"])
    with _lock:
        _index[path] = (stamp, index)
    return index
