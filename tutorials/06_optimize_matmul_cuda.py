"""
Optimizing matmul on a GPU, one step at a time (no GPU needed)
===============================================================

You will learn how the two levels of the classic GPU matmul change the
program and its memory traffic, and how kiln checks each step without a GPU:

thread binding -> register tiling (each thread a V x V tile of C) ->
shared-memory tiling (each block an L x L tile, k slices staged in shared
memory by cooperative fetching) -> kiln's CUDA template.

At every step we print the loop nest (TVMScript), a few lines of the
generated CUDA, and the traffic model computed from the scheduled program:
loads from global memory, and loads from shared memory into registers. For
an ``N^3`` matmul the lecture's formulas are ``2 N^3 / V`` global loads with
register tiling alone, then ``2 N^3 / L`` global->shared and ``2 N^3 / V``
shared->register loads with both levels. Each step is verified on the CPU:
the same program with its thread loops made serial (see
``kiln/schedules/cuda/check.py`` for why that keeps its meaning), against
numpy. On a machine with a GPU each step is also timed there, warmed up
until stable and sampled like kiln's benchmarks (``kiln.bench``).

Run: ``python tutorials/06_optimize_matmul_cuda.py`` (``KILN_TUTORIAL_SMALL=1``
for a quick run).
"""
# %%
# Setup
# -----
import os
import shutil

import numpy as np
import tvm
from tvm import te

import kiln
from kiln.autotune import Task
from kiln.bench import compare, module_sampler
from kiln.schedules.cuda import check

SMALL = os.environ.get("KILN_TUTORIAL_SMALL") == "1"
N = 128 if SMALL else 1024
T, V, S = 16, 4, 8  # threads per block side, register tile side, k slice
L = T * V           # the block's output tile side
target = kiln.cuda("sm_80")
gpu = tvm.cuda(0).exist

rng = np.random.default_rng(0)
a_np, b_np = rng.random((N, N), dtype=np.float32), rng.random((N, N), dtype=np.float32)
want = a_np @ b_np


def declare():
    A = te.placeholder((N, N), "float32", name="A")
    B = te.placeholder((N, N), "float32", name="B")
    k = te.reduce_axis((0, N), "k")
    C = te.compute((N, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return tvm.s_tir.Schedule(te.create_prim_func([A, B, C]))


def report(step, sch):
    loops = [line.strip() for line in sch.mod.script().splitlines() if line.strip().startswith("for ")]
    (got,) = check.run_on_cpu(sch.mod, [a_np, b_np], [((N, N), "float32")])
    np.testing.assert_allclose(got, want, rtol=1e-3)  # the scheduled program, on the CPU
    kernels = check.check_resources(sch.mod, target, "matmul")
    counts = check.traffic(sch.mod)
    print(f"\n== {step} (verified on the CPU)")
    print("\n".join("   " + line for line in loops))
    print(f"   {kernels[0].threads} threads/block, {kernels[0].shared_bytes} B shared, "
          f"~{kernels[0].registers} registers/thread")
    if counts["global_to_shared"]:
        print(f"   traffic: global->shared {counts['global_to_shared']:,} (2N^3/L = {2 * N ** 3 // L:,}), "
              f"shared->register {counts['shared_to_register']:,} (2N^3/V = {2 * N ** 3 // V:,})")
    else:
        print(f"   traffic: global->register {counts['global_to_register']:,} (2N^3 = {2 * N ** 3:,}, "
              f"2N^3/V = {2 * N ** 3 // V:,})")
    if shutil.which("nvcc"):
        ptx = check.compile_ptx(sch.mod, target, "matmul")
        print(f"   nvcc: {len(ptx.splitlines())} lines of PTX for {target.arch}")
    executable = tvm.compile(sch.mod, target=target.tvm)
    source = check.cuda_source(executable.mod)
    keys = ("__global__", "__shared__", "__syncthreads", "float C_local[")
    body = [ln for ln in source.splitlines() if any(key in ln for key in keys)][:5]
    print("   CUDA: " + "\n         ".join(ln.strip() for ln in body))
    if gpu:
        dev = tvm.cuda(0)
        args = [tvm.runtime.tensor(a_np, dev), tvm.runtime.tensor(b_np, dev), tvm.runtime.empty((N, N), "float32", dev)]
        timed = compare({"gpu": module_sampler(executable.mod, args)}, repeat=5)["gpu"]
        print(f"   on the GPU: {2 * N ** 3 / timed['median_s'] / 1e9:.0f} GFLOPS (spread {timed['spread']:.0%})")


# %%
# Step 1: thread binding
# ----------------------
#
# One thread per output element: block (by, bx) and
# thread (ty, tx) pick C[i, j], and the thread loops over k reading A and B
# from global memory: 2 N^3 loads.
sch = declare()
i, j, k = sch.get_loops(sch.get_sblock("C"))
bi, ti = sch.split(i, [None, T])
bj, tj = sch.split(j, [None, T])
sch.reorder(bi, bj, ti, tj, k)
for loop, axis in ((bi, "blockIdx.y"), (bj, "blockIdx.x"), (ti, "threadIdx.y"), (tj, "threadIdx.x")):
    sch.bind(loop, axis)
report("thread binding", sch)

# %%
# Step 2: register tiling
# -----------------------
#
# Each thread computes a V x V tile of C in
# registers (``cache_write`` to "local"); per k it loads V values of A and V
# of B into registers (``cache_read`` to "local") and does V*V multiply-adds:
# global loads drop to 2 N^3 / V.
sch = declare()
block = sch.get_sblock("C")
a_reg, b_reg = sch.cache_read(block, 0, "local"), sch.cache_read(block, 1, "local")
acc = sch.cache_write(block, 0, "local")
i, j, k = sch.get_loops(block)
bi, ti, vi = sch.split(i, [None, T, V])
bj, tj, vj = sch.split(j, [None, T, V])
sch.reorder(bi, bj, ti, tj, k, vi, vj)
for loop, axis in ((bi, "blockIdx.y"), (bj, "blockIdx.x"), (ti, "threadIdx.y"), (tj, "threadIdx.x")):
    sch.bind(loop, axis)
sch.reverse_compute_at(acc, tj)
sch.compute_at(a_reg, k)
sch.compute_at(b_reg, k)
sch.decompose_reduction(block, k)
report("register tiling", sch)

# %%
# Step 3: shared-memory tiling
# ----------------------------
#
# The block's L x S slice of A and S x L slice
# of B are copied to shared memory by all T*T threads together (the copy's
# loops are fused and split over the threads: cooperative fetching); TVM puts
# __syncthreads() around the copies. Global->shared loads: 2 N^3 / L; the
# threads then read shared memory into registers: 2 N^3 / V.
sch = declare()
block = sch.get_sblock("C")
a_sh, b_sh = sch.cache_read(block, 0, "shared"), sch.cache_read(block, 1, "shared")
a_reg, b_reg = sch.cache_read(block, 0, "local"), sch.cache_read(block, 1, "local")
acc = sch.cache_write(block, 0, "local")
i, j, k = sch.get_loops(block)
bi, ti, vi = sch.split(i, [None, T, V])
bj, tj, vj = sch.split(j, [None, T, V])
ko, ki = sch.split(k, [None, S])
sch.reorder(bi, bj, ti, tj, ko, ki, vi, vj)
for loop, axis in ((bi, "blockIdx.y"), (bj, "blockIdx.x"), (ti, "threadIdx.y"), (tj, "threadIdx.x")):
    sch.bind(loop, axis)
sch.reverse_compute_at(acc, tj)
sch.compute_at(a_reg, ki)
sch.compute_at(b_reg, ki)
for staged in (a_sh, b_sh):
    sch.compute_at(staged, ko)
    rounds, ty, tx = sch.split(sch.fuse(*sch.get_loops(staged)[-2:]), [None, T, T])
    sch.bind(ty, "threadIdx.y")
    sch.bind(tx, "threadIdx.x")
sch.decompose_reduction(block, ko)
report("shared-memory tiling", sch)

# %%
# Step 4: kiln's template
# -----------------------
#
# kiln's template does the same with knobs (thread grid, register
# tile, k slice, vectorized cooperative loads, unrolling), pads shapes the
# tiles do not divide, and checks the resources before compiling.
task = Task.create("matmul", [(N, N), (N, N)], target=target)
lowered = task.lower({"threads_m": T, "threads_n": T, "tile_m": V, "tile_n": V, "tile_k": S})
report(f"kiln's template {lowered.cfg.resolved()}", lowered.sch)

# %%
# Summary
# -------
print(f"\nEvery step computed A @ B ({N}x{N}) correctly on the CPU; the traffic model shows "
      f"register tiling dividing global loads by V={V} and shared-memory tiling by L={L}.")
