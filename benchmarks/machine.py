"""The machine's ceilings, measured with TVM kernels in this process:
fp32 FMA peak (GFLOPS) and STREAM-triad bandwidth (GB/s), with TVM's pool at
kiln's thread count. Ratios in the benchmark suite are taken against these.

Run: ``python benchmarks/machine.py [--json]``
"""
from __future__ import annotations

import argparse
import json

import numpy as np
import tvm
from tvm import te

import kiln

CHAINS = 12  # independent FMA chains per thread: enough to cover FMA latency x ports


def fma_peak(target=None, iters: int = 1 << 14) -> float:
    """GFLOPS of a kernel doing only vector FMAs on independent register chains."""
    target = kiln.runtime.as_target(target)
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
    t, c, v, kk = sch.get_loops(block)
    sch.reorder(t, kk, c, v)
    sch.parallel(t)
    sch.unroll(c)
    sch.vectorize(v)  # before decompose_reduction: TVM rejects it on the update block after
    sch.decompose_reduction(block, kk)
    mod = tvm.compile(sch.mod, target=target.tvm)
    assert "fma" in mod.mod.inspect_source(), "the FMA kernel did not use fused multiply-adds"
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
    target = kiln.runtime.as_target(target)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    res = {"cpu": kiln.cpu().mcpu, "threads": tvm.runtime.num_threads(),
           "fma_peak_gflops": fma_peak(), "triad_gbps": triad_bandwidth()}
    print(json.dumps(res) if args.json else "\n".join(f"{k:>16}: {v}" for k, v in res.items()))


if __name__ == "__main__":
    main()
