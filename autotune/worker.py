"""A build or measurement worker process: ``python -m kiln.autotune.worker``.

It reads one JSON request per line on stdin and answers one JSON line on the
protocol pipe (the original stdout; anything a kernel or TVM prints goes to
stderr instead). It needs no op registry: a build request carries the
scheduled module as TVM JSON, a run request the path of the compiled library
and of the inputs/expected outputs (``.npz``). If a kernel crashes or hangs,
only this process dies; the parent records the error and starts a new one.
Started with ``-m``, it imports the ``kiln`` package first, which sizes TVM's
thread pool like the parent's.

Requests::

    {"cmd": "build", "module": <tvm json>, "target": "cpu:<mcpu>", "out": <.so path>}
    {"cmd": "run", "library": <.so>, "data": <.npz>, "number": n, "repeat": r,
     "min_repeat_ms": ms, "rtol": x, "atol": y, "device": "cpu" | "cuda",
     "rpc": null | {"host", "port", "key", "session_timeout"}}
    {"cmd": "compare", "libraries": [<.so>, ...], "rounds": n, and the rest as for run but repeat}
"""
from __future__ import annotations

import json
import math
import os
import sys
import time
import traceback

import numpy as np

from ..errors import tvm_message


def build(req: dict) -> dict:
    import tvm

    from ..runtime.device import as_target
    from ..runtime.link import link_shared

    start = time.perf_counter()
    mod = tvm.ir.load_json(req["module"])
    executable = tvm.compile(mod, target=as_target(req["target"]).tvm)
    executable.export_library(req["out"], fcompile=link_shared)
    return {"ok": True, "build_s": time.perf_counter() - start}


def run(req: dict) -> dict:
    """One library: checked against the expected outputs, then timed in
    ``repeat`` repeats."""
    start = time.perf_counter()
    loaded = _load(req, [req["library"]])
    if isinstance(loaded, dict):
        return loaded
    dev, args, outs, (module,) = loaded
    timer = module.time_evaluator("main", dev, number=req["number"], repeat=req["repeat"],
                                  min_repeat_ms=req["min_repeat_ms"])
    costs = [float(c) for c in timer(*args, *outs).results]
    return {"ok": True, "costs": costs, "measure_s": time.perf_counter() - start, "device": _device_name(req)}


def compare(req: dict) -> dict:
    """Several libraries of one task, each checked, then timed in turns:
    ``rounds`` rounds of one repeat each (of at least ``min_repeat_ms``),
    each round in a rotated order, so a drift in the machine's speed falls
    on every library alike; ``costs`` holds each library's repeats."""
    start = time.perf_counter()
    loaded = _load(req, req["libraries"])
    if isinstance(loaded, dict):
        return loaded
    dev, args, outs, modules = loaded
    timers = [_calibrated(m, dev, [*args, *outs], req["number"], req["min_repeat_ms"]) for m in modules]
    costs: list[list[float]] = [[] for _ in modules]
    for turn in range(req["rounds"]):
        for i in [(turn + k) % len(modules) for k in range(len(modules))]:
            costs[i].append(float(timers[i](*args, *outs).results[0]))
    return {"ok": True, "costs": costs, "measure_s": time.perf_counter() - start, "device": _device_name(req)}


def _calibrated(module, dev, args: list, number: int, min_repeat_ms: float):
    """A timer of one repeat of a fixed number of calls that lasts about
    ``min_repeat_ms`` (at least ``number`` calls), found by one warm-up
    repeat: TVM's own search for that count would run again in every turn."""
    probe = module.time_evaluator("main", dev, number=number, repeat=1, min_repeat_ms=min_repeat_ms)
    seconds = float(probe(*args).results[0])
    calls = max(number, math.ceil(min_repeat_ms / 1e3 / max(seconds, 1e-9)))
    return module.time_evaluator("main", dev, number=calls, repeat=1)


def _device_name(req: dict) -> str:
    return f"rpc:{req['rpc']['key']}" if req.get("rpc") else "local"


def _load(req: dict, libraries: list[str]):
    """``(device, inputs, outputs, modules)`` with each library loaded and its
    result checked against the expected outputs, or an error reply."""
    import tvm

    with np.load(req["data"], allow_pickle=False) as data:
        inputs = [data[f"in{i}"] for i in range(int(data["n_in"]))]
        expected = [data[f"out{i}"] for i in range(int(data["n_out"]))]
    rpc = req.get("rpc")
    if rpc:
        from tvm import rpc as tvm_rpc

        remote = tvm_rpc.connect_tracker(rpc["host"], int(rpc["port"])).request(
            rpc["key"], priority=1, session_timeout=rpc.get("session_timeout", 0))
        dev = remote.cuda(0) if req.get("device") == "cuda" else remote.cpu(0)
    else:
        dev = tvm.cuda(0) if req.get("device") == "cuda" else tvm.cpu(0)
    if not dev.exist:  # checked first: a CUDA library does not even load where CUDA is absent
        return {"ok": False, "kind": "runtime", "message": f"no {req.get('device', 'cpu')} device to measure on"}
    modules = []
    for library in libraries:
        if rpc:
            remote.upload(library)
            modules.append(remote.load_module(os.path.basename(library)))
        else:
            modules.append(tvm.runtime.load_module(library))
    args = [tvm.runtime.tensor(a, dev) for a in inputs]
    outs = [tvm.runtime.empty(e.shape, str(e.dtype), dev) for e in expected]
    for module in modules:
        module["main"](*args, *outs)
        for i, (got, want) in enumerate(zip(outs, expected)):
            got = got.numpy()
            if not np.allclose(got, want, rtol=req["rtol"], atol=req["atol"], equal_nan=True):
                err = float(np.nanmax(np.abs(got.astype(np.float64) - want.astype(np.float64)))) if got.size else 0.0
                return {"ok": False, "kind": "wrong_result",
                        "message": f"output {i} differs from the numpy reference (max abs error {err:.3g})"}
    return dev, args, outs, modules


def main() -> None:
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # stray prints go to stderr, never into the protocol
    sys.stdout = sys.stderr
    for line in sys.stdin:
        req = {}
        try:
            req = json.loads(line)
            handler = {"build": build, "run": run, "compare": compare,
                       "ping": lambda _: {"ok": True, "pid": os.getpid()}}[req["cmd"]]
            reply = handler(req)
        except Exception as exc:  # noqa: BLE001 - every failure goes back as an error reply
            kind = "build" if req.get("cmd") == "build" else "rpc" if req.get("rpc") else "runtime"
            reply = {"ok": False, "kind": kind, "message": f"{type(exc).__name__}: {tvm_message(exc)}"[:500],
                     "trace": traceback.format_exc()[-2000:]}
        protocol.write(json.dumps(reply) + "\n")


if __name__ == "__main__":
    main()
