"""
Optimizing matmul on a CPU, one step at a time
==============================================

You will learn how each classic optimization changes the loop nest and the
speed of ``C = A @ B``, timed beside numpy (OpenBLAS) in the same run:

naive -> loop reorder -> register tiling -> cache tiling -> packing B ->
vectorize -> parallel -> kiln's default template.

Each step is one function that writes its whole schedule, starting from the
plain declaration, so that it reads on its own (``# new`` marks what a step
adds to the one before); ``report`` compiles it, checks it against numpy,
times it and prints its loop nest.

Register tiling keeps a ``v1 x v2`` tile of C in registers while k runs: each
loaded A element is reused ``v2`` times and each B element ``v1`` times, so
loads drop from ``2 n^3`` (two per multiply-add) to ``n^3/v1 + n^3/v2``.

Run: ``python tutorials/02_optimize_matmul_cpu.py`` (``KILN_TUTORIAL_SMALL=1``
for a quick run).
"""
# %%
# Setup
# -----
import os

import numpy as np
import tvm
from tvm import te

import kiln
from kiln.bench import compare, kernel_sampler, module_sampler
from kiln.bench.reference import NumpyReference

SMALL = os.environ.get("KILN_TUTORIAL_SMALL") == "1"
N = 128 if SMALL else 1024
TM, TN, TK = 8, 32, 64  # register tile rows, columns (2 AVX-512 vectors), k block
FLOP = 2 * N ** 3
target = kiln.cpu()

rng = np.random.default_rng(0)
a_np, b_np = rng.random((N, N), dtype=np.float32), rng.random((N, N), dtype=np.float32)
a, b = tvm.runtime.tensor(a_np), tvm.runtime.tensor(b_np)
want = a_np @ b_np

# numpy's matmul is the yardstick. It runs in a child process, at full speed
# (without the OpenBLAS pins some machines set), and every step is timed
# interleaved with it, warmed up first (kiln.bench.timing), so that a change
# in the machine's speed hits both sides.
numpy_blas = NumpyReference()
numpy_blas.prepare(kiln.te.get_op("matmul").check([(N, N), (N, N)]))  # the workload: matmul of two NxN float32


def declare():
    """``C = A @ B`` as a tensor expression, in a fresh schedule."""
    A = te.placeholder((N, N), "float32", name="A")
    B = te.placeholder((N, N), "float32", name="B")
    k = te.reduce_axis((0, N), "k")
    C = te.compute((N, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return tvm.s_tir.Schedule(te.create_prim_func([A, B, C]))


speeds = {}  # step -> (kiln GFLOPS, numpy GFLOPS), for the figure at the end


def print_speed(step, sampler):
    """Time ``sampler`` interleaved with numpy, print both rates and keep them in ``speeds``."""
    sides = compare({"kiln": sampler, "numpy": numpy_blas.sample}, repeat=3)
    speeds[step] = (FLOP / sides["kiln"]["median_s"] / 1e9, FLOP / sides["numpy"]["median_s"] / 1e9)
    print(f"\n== {step}: {speeds[step][0]:.1f} GFLOPS (numpy {speeds[step][1]:.1f})")


def report(step, sch):
    """Compile ``sch``, check it against numpy, time it and print its loop nest."""
    executable = tvm.compile(sch.mod, target=target.tvm)
    c = tvm.runtime.empty((N, N), "float32")
    executable(a, b, c)
    np.testing.assert_allclose(c.numpy(), want, rtol=1e-3)
    print_speed(step, module_sampler(executable.mod, [a, b, c]))
    loops = [line for line in sch.mod.script().splitlines() if line.strip().startswith("for ")]
    indent = len(loops[0]) - len(loops[0].lstrip())
    print("\n".join("   " + line[indent:] for line in loops))


# %%
# 1. Naive
# --------
#
# The loops run i, j, k. The inner k loop walks B by column: a cache miss per step.
def naive():
    return declare()


report("naive", naive())


# %%
# 2. Loop reorder
# ---------------
#
# Reorder to i, k, j: the inner loop walks a row of B and of C contiguously.
def loop_reorder():
    sch = declare()
    i, j, k = sch.get_loops(sch.get_sblock("C"))
    sch.reorder(i, k, j)
    return sch


report("loop reorder", loop_reorder())


# %%
# 3. Register tiling
# ------------------
#
# A TM x TN tile of C, accumulated in a local buffer
# (``cache_write``) that the compiler keeps in registers while k runs, and
# written to C once the tile is done (``reverse_compute_at``). The tile's
# zeroing becomes its own loop (``decompose_reduction``). Expect steps 3-5 to
# run *slower* than step 2: LLVM auto-vectorized the reordered loop, while the
# tiled loops stay scalar until step 6 vectorizes the tile's columns — then
# the tile pays off.
def register_tiling():
    sch = declare()
    block = sch.get_sblock("C")
    i, j, k = sch.get_loops(block)
    io, ii = sch.split(i, [None, TM])
    jo, ji = sch.split(j, [None, TN])
    sch.reorder(io, jo, k, ii, ji)
    acc = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(acc, jo)
    sch.decompose_reduction(block, k)
    return sch


report(f"register tiling {TM}x{TN}", register_tiling())


# %%
# 4. Cache tiling
# ---------------
#
# Block k by TK, so that one TM x TK slice of A and one
# TK x TN slice of B stay in L1 while the tile accumulates.
def cache_tiling():
    sch = declare()
    block = sch.get_sblock("C")
    i, j, k = sch.get_loops(block)
    io, ii = sch.split(i, [None, TM])
    jo, ji = sch.split(j, [None, TN])
    ko, ki = sch.split(k, [None, TK])  # new
    sch.reorder(io, jo, ko, ki, ii, ji)
    acc = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(acc, jo)
    sch.decompose_reduction(block, ko)
    return sch


report("+ cache tiling over k", cache_tiling())


# %%
# 5. Array packing
# ----------------
#
# Copy B into panels ``[N/TN, N, TN]`` (``cache_read``,
# then ``transform_layout`` of the copy), so that the tile's inner loop
# streams one contiguous panel instead of striding across rows of B.
def packing():
    sch = declare()
    block = sch.get_sblock("C")
    sch.cache_read(block, 1, "global")  # new
    sch.transform_layout(block, ("read", 1), lambda kk, jj: (jj // TN, kk, jj % TN))  # new
    i, j, k = sch.get_loops(block)
    io, ii = sch.split(i, [None, TM])
    jo, ji = sch.split(j, [None, TN])
    ko, ki = sch.split(k, [None, TK])
    sch.reorder(io, jo, ko, ki, ii, ji)
    acc = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(acc, jo)
    sch.decompose_reduction(block, ko)
    return sch


report("+ packed B panels", packing())


# %%
# 6. Vectorization
# ----------------
#
# The tile's TN columns become SIMD lanes and its TM rows
# are unrolled, so the TM x TN accumulators are vector registers. TVM
# vectorizes a reduction's loop only before ``decompose_reduction``, which
# then gives the zeroing loop the same annotations.
def vectorize():
    sch = declare()
    block = sch.get_sblock("C")
    sch.cache_read(block, 1, "global")
    sch.transform_layout(block, ("read", 1), lambda kk, jj: (jj // TN, kk, jj % TN))
    i, j, k = sch.get_loops(block)
    io, ii = sch.split(i, [None, TM])
    jo, ji = sch.split(j, [None, TN])
    ko, ki = sch.split(k, [None, TK])
    sch.reorder(io, jo, ko, ki, ii, ji)
    acc = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(acc, jo)
    sch.vectorize(ji)  # new
    sch.unroll(ii)  # new
    sch.decompose_reduction(block, ko)
    return sch


report("+ vectorize and unroll", vectorize())


# %%
# 7. Parallel
# -----------
#
# The tiles of C are independent, so the two tile loops are
# fused into one and spread over every core.
def parallel():
    sch = declare()
    block = sch.get_sblock("C")
    sch.cache_read(block, 1, "global")
    sch.transform_layout(block, ("read", 1), lambda kk, jj: (jj // TN, kk, jj % TN))
    i, j, k = sch.get_loops(block)
    io, ii = sch.split(i, [None, TM])
    jo, ji = sch.split(j, [None, TN])
    ko, ki = sch.split(k, [None, TK])
    sch.reorder(io, jo, ko, ki, ii, ji)
    acc = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(acc, jo)
    sch.vectorize(ji)
    sch.unroll(ii)
    sch.parallel(sch.fuse(io, jo))  # new
    sch.decompose_reduction(block, ko)
    return sch


report("+ parallel", parallel())

# %%
# 8. kiln's template
# ------------------
#
# kiln's default template does all of the above, with knobs whose defaults
# come from the shape and the CPU (vector lanes, cores), plus padding for odd
# sizes and a local write cache for every tile.
kernel = kiln.build("matmul", [(N, N), (N, N)])
np.testing.assert_allclose(kernel(a_np, b_np), want, rtol=1e-3)
print_speed("kiln default template", kernel_sampler(kernel, [a_np, b_np]))
print(f"   knobs: {kernel.resolved_config()}")
numpy_blas.close()

# %%
# Summary
# -------
#
# Each step's speed beside numpy's, timed in the same turns (needs
# matplotlib, the ``plot`` extra).
try:
    import matplotlib.pyplot as plt
except ImportError:
    print("no plot: matplotlib is not installed")
else:
    fig, ax = plt.subplots(figsize=(7, 3.5))
    steps = list(speeds)
    ax.barh(steps, [kiln_rate for kiln_rate, _ in speeds.values()], label="kiln")
    ax.plot([numpy_rate for _, numpy_rate in speeds.values()], steps, "k|", markersize=14, label="numpy, same turns")
    ax.invert_yaxis()
    ax.set_xlabel(f"GFLOPS, {N}x{N} float32 matmul")
    ax.legend(loc="upper right")
    fig.tight_layout()

print(f"\nEvery step computed A @ B ({N}x{N}) correctly; the register tile pays off once it is vectorized "
      f"(step 6), and the template adds what the shape and the CPU ask for.")
