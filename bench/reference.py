"""The numpy/OpenBLAS reference, at full speed, in a child process.

Some machines pin OpenBLAS to an older kernel through the environment
(``OPENBLAS_CORETYPE=Haswell``, ``OPENBLAS_L2_SIZE``), which halves numpy's
matmul on an AVX-512 CPU. A benchmark must compare with the library as a user
without those variables gets it, so the reference runs in a child process
whose environment has them removed (this process's environment is left as it
is) and ``OPENBLAS_NUM_THREADS`` set to kiln's thread count. The child reports
the BLAS kernel it actually runs (threadpoolctl's ``architecture``).

The child builds the same seeded inputs as kiln's side
(``kiln.runtime.measure.random_inputs``) and times the op's registered numpy
reference (``op.reference``), one sample per request, so that the parent can
interleave its samples with kiln's; a reference that returns a view of an
input has it copied in the time, as the kernel writes its result. Protocol:
one JSON object per line on stdin, one answer per line on stdout.

Run by ``NumpyReference``; ``python -m kiln.bench.reference`` is the child.
"""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import tempfile

from ..errors import KilnError

#: variables that pin OpenBLAS to a kernel; removed in the reference's process only
BLAS_PINS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


class ReferenceError_(KilnError):
    """The reference process failed (it could not start, or the op's reference raised)."""


def blas_info() -> list[dict]:
    """The BLAS libraries loaded in this process: ``architecture`` (the kernel),
    ``internal_api``, ``version`` and ``num_threads``, from threadpoolctl."""
    from threadpoolctl import threadpool_info

    keys = ("internal_api", "architecture", "version", "num_threads")
    return [{k: lib.get(k) for k in keys} for lib in threadpool_info() if lib.get("user_api") == "blas"]


def child_env(threads: int) -> dict[str, str]:
    """A copy of this environment without the BLAS pins, with ``threads`` BLAS threads."""
    env = {k: v for k, v in os.environ.items() if k not in BLAS_PINS}
    env["OPENBLAS_NUM_THREADS"] = str(threads)
    return env


class NumpyReference:
    """A child process timing ops' numpy references at full speed.

    >>> with NumpyReference(threads=2) as ref:
    ...     ref.info["blas"][0]["architecture"]       # e.g. 'SkylakeX' or 'Zen'
    ...     ref.prepare(get_op("matmul").check([(1024, 1024), (1024, 1024)]))
    ...     ref.sample()                                # seconds per call
    """

    def __init__(self, threads: int | None = None):
        from ..config import num_threads

        self.threads = threads or num_threads()
        self._stderr = tempfile.TemporaryFile(mode="w+")
        self._proc = subprocess.Popen([sys.executable, "-m", "kiln.bench.reference"], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=self._stderr, text=True,
                                      env=child_env(self.threads))
        self.info = self._ask({"cmd": "info"})

    def _ask(self, request: dict) -> dict:
        try:
            self._proc.stdin.write(json.dumps(request) + "\n")
            self._proc.stdin.flush()
            line = self._proc.stdout.readline()
        except (BrokenPipeError, OSError):
            line = ""
        if not line:
            self._stderr.seek(0)
            tail = self._stderr.read()[-2000:].strip()
            raise ReferenceError_(f"the numpy reference process ended unexpectedly: {tail or 'no message'}")
        answer = json.loads(line)
        if "error" in answer:
            raise ReferenceError_(f"the numpy reference failed: {answer['error']}", op=request.get("op"))
        return answer

    def prepare(self, workload, seed: int = 0) -> None:
        """Make the seeded inputs of a ``Workload`` (``Op.check``) in the child;
        ``sample`` then times its op's reference."""
        self._ask({"cmd": "prepare", "op": workload.op.name, "shapes": [list(s) for s in workload.shapes],
                   "dtypes": list(workload.dtypes), "attrs": repr(dict(workload.attrs)), "seed": seed})

    def sample(self) -> float:
        """Seconds per call of the prepared reference (one sample)."""
        return self._ask({"cmd": "sample"})["seconds"]

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.stdin.close()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._stderr.close()

    def __enter__(self) -> "NumpyReference":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _written(result, inputs):
    """The reference's result as memory of its own, as the kernel writes it: a
    view of an input, which numpy returns for free (``transpose``,
    ``broadcast_to``), is copied, so the reference's time is that of
    producing the array, not the view."""
    import numpy as np

    results = result if isinstance(result, (list, tuple)) else [result]
    return [np.array(r) if isinstance(r, np.ndarray) and any(np.may_share_memory(r, a) for a in inputs) else r
            for r in results]


def _serve() -> None:
    """The child's loop: answer requests until stdin closes."""
    import numpy as np

    from ..runtime.measure import random_inputs
    from ..te import get_op
    from .timing import calls_sampler

    sample = None
    for line in sys.stdin:
        request = json.loads(line)
        try:
            if request["cmd"] == "info":
                answer = {"blas": blas_info(), "numpy": np.__version__}
            elif request["cmd"] == "prepare":
                op = get_op(request["op"])
                attrs = ast.literal_eval(request["attrs"])
                arrays = random_inputs([tuple(s) for s in request["shapes"]], request["dtypes"], request["seed"])
                op.reference(*arrays, **attrs)  # fails here, at once, if it is going to
                sample = calls_sampler(lambda: _written(op.reference(*arrays, **attrs), arrays))
                answer = {}
            else:
                answer = {"seconds": sample()}
        except Exception as exc:  # reported to the parent, which raises it as a KilnError
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    _serve()
