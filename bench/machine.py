"""The machine a result comes from, and its ceilings.

Every benchmark result starts with ``header()``: the date, the CPU (its model
name from ``/proc/cpuinfo``, its LLVM name, the ISA read from the target's
features), cores and threads, the fp32 FMA peak and STREAM-triad bandwidth
measured here with TVM kernels, the BLAS kernel numpy's reference really runs,
and the versions of the references. Figures from different machines are
never comparable; the header says which machine a file is about.
"""
from __future__ import annotations

import datetime
import functools
import platform
from importlib import metadata

import numpy as np
import tvm
from tvm import te
from tvm.target import codegen

from ..config import usable_cores
from ..runtime import as_target
from .reference import BLAS_PINS, blas_info

CHAINS = 12  # independent FMA chains per thread: enough to cover FMA latency x ports
# ISA features worth naming in a header, widest first; absent ones are not listed
FEATURES = ("avx512f", "avx512vnni", "avx512bf16", "amx-tile", "avx2", "fma", "avx", "sse4.2", "neon", "sve")
PACKAGES = ("numpy", "torch", "onnxruntime", "onnx", "apache-tvm")


def fma_peak(target=None, iters: int = 1 << 14) -> float:
    """GFLOPS of a kernel doing only vector FMAs on independent register chains."""
    target = as_target(target)
    lanes = target.lanes("float32")
    threads = target.cores
    a = te.placeholder((threads, CHAINS, lanes), "float32", name="a")
    k = te.reduce_axis((0, iters), "k")
    # acc = acc * 0.5 + a over k: one FMA per element per step on a loop-carried
    # accumulator (nothing to hoist), independent chains to hide the latency.
    fma = te.comm_reducer(lambda acc, x: acc * te.const(0.5, "float32") + x,
                          lambda dtype: te.const(0, dtype), name="fma")
    out = te.compute((threads, CHAINS, lanes), lambda t, c, v: fma(a[t, c, v], axis=k), name="fma")
    sch = tvm.s_tir.Schedule(te.create_prim_func([a, out]))
    block = sch.get_sblock("fma")
    # the chains accumulate in a local tile (registers): accumulating in the output buffer
    # stores every chain at every step, and a core with one vector store per cycle (Zen 3)
    # then runs one FMA per cycle, not two (76 instead of ~190 GFLOPS on 2 cores)
    tile = sch.cache_write(block, 0, "local")
    t, c, v, kk = sch.get_loops(block)
    sch.reorder(t, kk, c, v)
    sch.reverse_compute_at(tile, t)
    sch.parallel(t)
    sch.unroll(c)
    sch.vectorize(v)  # before decompose_reduction: TVM rejects it on the update block after
    sch.decompose_reduction(block, kk)
    mod = tvm.compile(sch.mod, target=target.tvm)
    if "fma" not in mod.mod.inspect_source():
        raise RuntimeError("the FMA peak kernel did not compile to fused multiply-adds")
    dev = target.device()
    x = tvm.runtime.tensor(np.full((threads, CHAINS, lanes), 0.5, "float32"), dev)
    y = tvm.runtime.empty((threads, CHAINS, lanes), "float32", dev)
    # A peak is a best case: the fastest of the repeats, not the median.
    t = mod.mod.time_evaluator("main", dev, number=5, repeat=10)(x, y).min
    return 2.0 * threads * CHAINS * lanes * iters / t / 1e9


def triad_bandwidth(n: int = 1 << 25, target=None) -> float:
    """GB/s of STREAM's triad ``a = b + 3 c`` over ``n`` float32 (12 bytes an
    element): a plain loop split across the threads and vectorized, written
    here rather than taken from kiln's templates, so it is a reference."""
    target = as_target(target)
    b = te.placeholder((n,), "float32", name="b")
    c = te.placeholder((n,), "float32", name="c")
    a = te.compute((n,), lambda i: b[i] + te.const(3.0, "float32") * c[i], name="triad")
    sch = tvm.s_tir.Schedule(te.create_prim_func([b, c, a]))
    (i,) = sch.get_loops(sch.get_sblock("triad"))
    outer, inner = sch.split(i, [None, target.lanes("float32")])
    sch.parallel(outer)
    sch.vectorize(inner)
    mod = tvm.compile(sch.mod, target=target.tvm)
    dev = target.device()
    rng = np.random.default_rng(0)
    tb, tc = (tvm.runtime.tensor(rng.random(n, dtype=np.float32), dev) for _ in range(2))
    ta = tvm.runtime.empty((n,), "float32", dev)
    t = mod.mod.time_evaluator("main", dev, number=3, repeat=10)(tb, tc, ta).min
    return 12 * n / t / 1e9


def cpu_model_name() -> str:
    """The CPU's marketing name (``model name`` in /proc/cpuinfo, else the platform's)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model", "Hardware") and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def isa(target=None) -> dict:
    """The vector ISA as the compilation target sees it: vector width and features."""
    target = as_target(target)
    present = [f for f in FEATURES if codegen.llvm_cpu_has_features([f], target.tvm)]
    name = "AVX-512" if "avx512f" in present else "AVX2" if "avx2" in present else \
        "AVX" if "avx" in present else (present[0].upper() if present else "scalar")
    return {"name": name, "vector_bits": target.vector_bits, "float32_lanes": target.lanes("float32"),
            "features": present}


def versions() -> dict:
    """Installed versions of the references (None where absent), read without importing them."""
    out = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


@functools.lru_cache(maxsize=None)
def ceilings(quick: bool = False) -> tuple[float, float]:
    """``(fma_peak_gflops, triad_gbps)``, measured once per process (smaller triad when quick)."""
    return fma_peak(), triad_bandwidth(1 << 22 if quick else 1 << 25)


def header(reference_info: dict, quick: bool = False) -> dict:
    """What every result says about where it came from. ``reference_info`` is
    ``NumpyReference.info`` (the BLAS the reference process loaded)."""
    target = as_target(None)
    peak, triad = ceilings(quick)
    return {"date": datetime.datetime.now().isoformat(timespec="seconds"), "cpu_model": cpu_model_name(),
            "llvm_cpu": target.mcpu, "isa": isa(target), "cores": usable_cores(),
            "threads": tvm.runtime.num_threads(), "fma_peak_gflops": peak, "triad_gbps": triad,
            "blas": reference_info["blas"], "blas_in_this_process": blas_info(),
            "reference_env_removed": list(BLAS_PINS), "versions": versions()}
