"""
Optimizing matmul on a CPU, one step at a time
==============================================

You will learn how each classic optimization changes the loop nest and the
speed of ``C = A @ B``, measured beside numpy (OpenBLAS) in the same run:

naive -> loop reorder -> register tiling -> cache tiling -> packing B ->
vectorize -> parallel -> kiln's default template.

Register tiling keeps a ``v1 x v2`` tile of C in registers while k runs: each
loaded A element is reused ``v2`` times and each B element ``v1`` times, so
loads drop from ``2 n^3`` (two per multiply-add) to ``n^3/v1 + n^3/v2``.

Run: ``python tutorials/02_optimize_matmul_cpu.py`` (``KILN_TUTORIAL_SMALL=1``
for a quick run).
"""
# %%
import os
import time

import numpy as np
import tvm
from tvm import te

import kiln

SMALL = os.environ.get("KILN_TUTORIAL_SMALL") == "1"
N = 128 if SMALL else 1024
TM, TN, TK = 8, 32, 64  # register tile rows, columns (2 AVX-512 vectors), k block
target = kiln.cpu()

rng = np.random.default_rng(0)
a_np, b_np = rng.random((N, N), dtype=np.float32), rng.random((N, N), dtype=np.float32)
a, b = tvm.runtime.tensor(a_np), tvm.runtime.tensor(b_np)
want = a_np @ b_np  # warm-up: starts OpenBLAS's threads
start = time.perf_counter()
for _ in range(3):
    want = a_np @ b_np
numpy_gflops = 2 * N ** 3 / ((time.perf_counter() - start) / 3) / 1e9


def declare():
    A = te.placeholder((N, N), "float32", name="A")
    B = te.placeholder((N, N), "float32", name="B")
    k = te.reduce_axis((0, N), "k")
    C = te.compute((N, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return tvm.s_tir.Schedule(te.create_prim_func([A, B, C]))


def report(step, sch):
    loops = [line.strip() for line in sch.mod.script().splitlines() if line.strip().startswith("for ")]
    executable = tvm.compile(sch.mod, target=target.tvm)
    c = tvm.runtime.empty((N, N), "float32")
    executable(a, b, c)
    np.testing.assert_allclose(c.numpy(), want, rtol=1e-3)
    seconds = executable.mod.time_evaluator("main", tvm.cpu(), number=1, repeat=3, min_repeat_ms=20)(a, b, c).median
    print(f"\n== {step}: {2 * N ** 3 / seconds / 1e9:.1f} GFLOPS (numpy {numpy_gflops:.1f})")
    print("\n".join("   " + line for line in loops))


# %%
# 1. Naive: i, j, k. The inner k loop walks B by column: a cache miss per step.
report("naive", declare())

# %%
# 2. Reorder to i, k, j: the inner loop walks a row of B and of C contiguously.
sch = declare()
i, j, k = sch.get_loops(sch.get_sblock("C"))
sch.reorder(i, k, j)
report("loop reorder", sch)


# %%
# 3. Register tiling: a TM x TN tile of C, accumulated in a local buffer that
# the compiler keeps in registers while k runs. Expect steps 3-5 to run
# *slower* than step 2: LLVM auto-vectorized the reordered loop, while the
# tiled loops stay scalar until step 6 vectorizes the tile's columns — then
# the tile pays off.
def tiled(cache_k=False, pack=False, vectorize=False, parallel=False):
    sch = declare()
    block = sch.get_sblock("C")
    if pack:  # 5. copy B into panels [N/TN, K, TN]: the micro-kernel streams it
        sch.cache_read(block, 1, "global")
        sch.transform_layout(block, ("read", 1), lambda kk, jj: (jj // TN, kk, jj % TN))
    i, j, k = sch.get_loops(block)
    io, ii = sch.split(i, [None, TM])
    jo, ji = sch.split(j, [None, TN])
    if cache_k:  # 4. block k so one A row slice and one B panel slice stay in L1
        ko, ki = sch.split(k, [None, TK])
        sch.reorder(io, jo, ko, ki, ii, ji)
    else:
        sch.reorder(io, jo, k, ii, ji)
    acc = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(acc, jo)
    if vectorize:  # 6. (TVM vectorizes a reduction's loop before decompose_reduction)
        sch.vectorize(ji)
        sch.unroll(ii)
    if parallel:  # 7. tiles of C on every core
        sch.parallel(sch.fuse(io, jo))
    sch.decompose_reduction(block, sch.get_loops(block)[2 if not parallel else 1])
    return sch


report("register tiling 8x32", tiled())
report("+ cache tiling over k", tiled(cache_k=True))
report("+ packed B panels", tiled(cache_k=True, pack=True))
report("+ vectorize and unroll", tiled(cache_k=True, pack=True, vectorize=True))
report("+ parallel", tiled(cache_k=True, pack=True, vectorize=True, parallel=True))

# %%
# 8. kiln's default template does all of the above, with knobs whose defaults
# come from the shape and the CPU (vector lanes, cores), plus padding for odd
# sizes and a local write cache for every tile.
kernel = kiln.build("matmul", [(N, N), (N, N)])
np.testing.assert_allclose(kernel(a_np, b_np), want, rtol=1e-3)
seconds = kernel.time(a, b)["median"]
print(f"\n== kiln default template: {2 * N ** 3 / seconds / 1e9:.1f} GFLOPS (numpy {numpy_gflops:.1f})")
print(f"   knobs: {kernel.resolved_config()}")
