"""Building and measuring configs in worker processes, with timeouts.

``Builder`` compiles a batch of scheduled modules in parallel (one worker
process per core). A runner then measures them one at a time — locally
(``LocalRunner``, so no two kernels compete for the cores; a batch in turns,
one repeat of each library at a time, in one worker: ``compare``), or on
devices registered with a TVM RPC tracker (``RPCRunner``, one measurement
per device at a time). Every call runs in a worker process with a timeout:
a config that crashes its worker or hangs comes back as an error
(``crash``, ``timeout``) and the worker is replaced, so the search goes on.

``tune`` calls ``runner.check()`` before it starts: an ``RPCRunner`` asks the
tracker for its summary within a few seconds and refuses a tracker that is
down or a key no device serves. During the run the tracker is asked again
before each batch and after a timeout, so a device that cannot be reached is
recorded as ``rpc`` (at once) rather than as a ``timeout`` per trial.
"""
from __future__ import annotations

import json
import os
import queue
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from .. import config as kiln_config
from ..errors import KilnError

START_TIMEOUT_S = 120.0


class Worker:
    """One ``kiln.autotune.worker`` process, restarted after a crash or a timeout."""

    def __init__(self):
        self.proc = None
        self._buf = b""
        self._log = tempfile.TemporaryFile()

    def call(self, request: dict, timeout: float) -> dict:
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        try:
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return self._died()
        line = self._readline(timeout)
        if line is None:
            self.close()
            return {"ok": False, "kind": "timeout", "message": f"no answer within {timeout:g} s; worker killed"}
        if line == b"":
            return self._died()
        return json.loads(line)

    def _start(self) -> None:
        self._buf = b""
        self._log.seek(0)
        self._log.truncate()
        self.proc = subprocess.Popen([sys.executable, "-m", "kiln.autotune.worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._log, start_new_session=True)
        self.proc.stdin.write(b'{"cmd": "ping"}\n')
        self.proc.stdin.flush()
        if not self._readline(START_TIMEOUT_S):
            self.close()
            raise RuntimeError(f"a tuning worker did not start: {self._log_tail()}")

    def _readline(self, timeout: float) -> bytes | None:
        """One protocol line; b"" if the worker exited, None on timeout."""
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return b""
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line

    def _died(self) -> dict:
        code = self.proc.wait()
        detail = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        tail = self._log_tail()
        self.proc = None
        return {"ok": False, "kind": "crash", "message": f"worker died ({detail}){': ' + tail if tail else ''}"}

    def _log_tail(self) -> str:
        self._log.seek(0)
        lines = self._log.read().decode(errors="replace").strip().splitlines()
        return lines[-1][:300] if lines else ""

    def close(self) -> None:
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self.proc.wait()
            self.proc = None


class _Pool:
    """Workers shared by threads: each call takes a free worker."""

    def __init__(self, size: int):
        self.workers = [Worker() for _ in range(max(1, size))]
        self._free: queue.Queue = queue.Queue()
        for w in self.workers:
            self._free.put(w)

    def map(self, requests: list[dict], timeout: float) -> list[dict]:
        def one(req):
            worker = self._free.get()
            try:
                return worker.call(req, timeout)
            finally:
                self._free.put(worker)

        with ThreadPoolExecutor(len(self.workers)) as ex:
            return list(ex.map(one, requests))

    def close(self) -> None:
        for w in self.workers:
            w.close()


class Builder:
    """Compiles scheduled modules to shared libraries, ``n_parallel`` at a time."""

    def __init__(self, n_parallel: int | None = None, timeout: float = 60.0):
        self.timeout = timeout
        self._pool = _Pool(n_parallel or kiln_config.usable_cores())

    def build(self, target, modules: list[str], folder: str) -> list[dict]:
        """``modules``: TVM JSON of scheduled IRModules. Each result has ``library``."""
        target_name = f"cpu:{target.mcpu}" if target.kind == "cpu" else f"cuda:{target.arch}"
        outs = [os.path.join(folder, f"k{time.monotonic_ns()}_{i}.so") for i in range(len(modules))]
        results = self._pool.map([{"cmd": "build", "module": m, "target": target_name, "out": o}
                                  for m, o in zip(modules, outs)], self.timeout)
        for res, out in zip(results, outs):
            if res.get("ok"):
                res["library"] = out
        return results

    def close(self) -> None:
        self._pool.close()


class LocalRunner:
    """Times each library in a worker process on this machine, one at a time.

    ``number`` calls per repeat (raised until a repeat lasts ``min_repeat_ms``),
    ``repeat`` repeats; the first call checks the result against the numpy
    reference (``rtol``/``atol``)."""

    def __init__(self, number: int = 1, repeat: int = 5, min_repeat_ms: int = 40, timeout: float = 30.0,
                 rtol: float = 1e-3, atol: float = 1e-3, n_parallel: int = 1):
        self.timing = {"number": number, "repeat": repeat, "min_repeat_ms": min_repeat_ms, "rtol": rtol, "atol": atol}
        self.timeout = timeout
        self.n_parallel = max(1, n_parallel)
        self._pool = _Pool(self.n_parallel)

    @property
    def in_turns(self) -> bool:
        """Whether a batch of trials is timed in turns in one worker
        (``compare``): with one measurement at a time, as here, it costs no
        parallelism."""
        return self.n_parallel == 1

    def describe(self) -> str:
        return "local"

    def check(self) -> None:
        """Raise a ``KilnError`` before tuning if measuring cannot work (local: it can)."""

    def _request(self, library: str, data: str, device: str) -> dict:
        return {"cmd": "run", "library": library, "data": data, "device": device, "rpc": None, **self.timing}

    def run(self, libraries: list[str], data: str, device: str = "cpu") -> list[dict]:
        """Measure each library on ``device`` ("cpu" or "cuda")."""
        return self._pool.map([self._request(lib, data, device) for lib in libraries], self.timeout)

    def compare(self, libraries: list[str], data: str, device: str = "cpu", rounds: int = 15) -> dict:
        """Time libraries of one task in turns, in one worker: ``rounds``
        rounds of one repeat each, in a rotated order. A host whose speed
        shifts for hundreds of milliseconds at a time (a shared 2-core VM:
        the same kernel 25 or 45 us for as long) would give a library timed
        in a block of repeats the phase it fell in; in turns, every library
        meets every phase. One reply: ``costs``, a list per library."""
        request = {**self._request(libraries[0], data, device), "cmd": "compare", "libraries": list(libraries),
                   "rounds": int(rounds)}
        request.pop("library")
        return self._pool.map([request], self.timeout * max(1, len(libraries)))[0]

    def close(self) -> None:
        self._pool.close()


class RPCRunner(LocalRunner):
    """Times each library on a device leased from a TVM RPC tracker by ``key``;
    ``n_parallel`` measurements run at once (one per device)."""

    def __init__(self, host: str, port: int, key: str, n_parallel: int = 1, session_timeout: float = 60.0,
                 connect_timeout: float = 5.0, **timing):
        super().__init__(n_parallel=n_parallel, **timing)
        self.rpc = {"host": host, "port": int(port), "key": key, "session_timeout": session_timeout,
                    "connect_timeout": connect_timeout}

    def describe(self) -> str:
        return f"rpc {self.rpc['host']}:{self.rpc['port']} key={self.rpc['key']}"

    def check(self) -> None:
        """Refuse a tracker that does not answer or a key no device serves; warn
        when every device of the key is busy (trials wait for one)."""
        problem, busy = self._problem()
        if problem:
            raise KilnError(problem, where="RPCRunner", arg="rpc")
        if busy:
            import warnings

            warnings.warn(busy, RuntimeWarning, stacklevel=2)

    def _problem(self) -> tuple[str | None, str | None]:
        """(why no device can be reached or None, a note that all are busy or None)."""
        host, port, key = self.rpc["host"], self.rpc["port"], self.rpc["key"]
        try:
            summary = tracker_summary(host, port, self.rpc["connect_timeout"])
        except (OSError, ValueError) as exc:
            return (f"no TVM RPC tracker answers at {host}:{port} ({exc}); start one with "
                    f"`python -m tvm.exec.rpc_tracker --host {host} --port {port}`"), None
        servers = [s for s in summary.get("server_info", []) if s.get("key", "").partition(":")[2] == key]
        if not servers:
            keys = sorted({s.get("key", "").partition(":")[2] for s in summary.get("server_info", [])})
            return (f"the tracker at {host}:{port} has no device registered under key {key!r} (registered: "
                    f"{', '.join(map(repr, keys)) or 'none'}); start one with `python -m tvm.exec.rpc_server "
                    f"--tracker {host}:{port} --key {key}`"), None
        free = summary.get("queue_info", {}).get(key, {}).get("free", 0)
        if free == 0:
            return None, f"all {len(servers)} device(s) under key {key!r} are busy: trials wait for a free one"
        return None, None

    def run(self, libraries: list[str], data: str, device: str = "cpu") -> list[dict]:
        return self._reachable(lambda: super(RPCRunner, self).run(libraries, data, device), len(libraries))

    def compare(self, libraries: list[str], data: str, device: str = "cpu", rounds: int = 15) -> dict:
        return self._reachable(lambda: [super(RPCRunner, self).compare(libraries, data, device, rounds)], 1)[0]

    def _reachable(self, measure, n: int) -> list[dict]:
        """``measure()``'s replies, or ``n`` ``rpc`` errors at once where the
        tracker has no device to reach; a timeout while the device went away
        becomes an ``rpc`` error too."""
        problem, _ = self._problem()
        if problem:  # fail the batch now rather than after one timeout per trial
            return [{"ok": False, "kind": "rpc", "message": problem} for _ in range(n)]
        results = measure()
        if any(r.get("kind") == "timeout" for r in results):
            problem, _ = self._problem()
            if problem:  # the device went away mid-batch: unreachable, not slow
                results = [{"ok": False, "kind": "rpc", "message": f"{problem} ({r['message']})"}
                           if r.get("kind") == "timeout" else r for r in results]
        return results

    def _request(self, library: str, data: str, device: str) -> dict:
        return {**super()._request(library, data, device), "rpc": self.rpc}


def tracker_summary(host: str, port: int, timeout: float = 5.0) -> dict:
    """The tracker's summary (``queue_info``, ``server_info``), asked over a
    socket that gives up after ``timeout`` seconds per step: TVM's own client
    retries a refused connection for a minute and waits on a silent peer forever.
    Raises ``OSError`` (unreachable, no answer) or ``ValueError`` (not a tracker)."""
    from tvm.rpc import base

    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(struct.pack("<i", base.RPC_TRACKER_MAGIC))
        magic = struct.unpack("<i", base.recvall(sock, 4))[0]
        if magic != base.RPC_TRACKER_MAGIC:
            raise ValueError("the server there is not a TVM RPC tracker")
        base.sendjson(sock, [base.TrackerCode.SUMMARY])
        reply = base.recvjson(sock)
    if not (isinstance(reply, list) and len(reply) == 2 and reply[0] == base.TrackerCode.SUCCESS):
        raise ValueError(f"unexpected tracker reply {str(reply)[:100]}")
    return reply[1]
