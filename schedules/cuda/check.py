"""Checking CUDA schedules on a machine without a GPU.

``resources(mod)``      threads per block, shared memory per block and an
                        estimate of registers per thread, per kernel, read
                        from the scheduled program.
``check_resources``     rejects a schedule over the limits with a clear error
                        before anything is compiled, and asks TVM's own GPU
                        verification (MetaSchedule's ``VerifyGPUCode``).
``compile_ptx``         the module's CUDA source through ``nvcc`` to PTX for
                        one architecture.
``on_cpu(mod)``         the same program with its thread bindings made serial
                        loops, to compile for the CPU and compare with numpy
                        (``run_on_cpu`` does both).
``traffic(mod)``        global->shared and shared->register loads.

Why ``on_cpu`` keeps the program's meaning: in the scheduled TensorIR every
stage of a kernel — a cooperative copy into shared memory, the loads into
registers, the compute, the write-back — is its own loop nest under the
block-level loops, and a thread-bound loop is a parallel loop whose iterations
are the threads. On the GPU the threads of a stage run concurrently and TVM
puts a ``__syncthreads()`` between a stage that writes shared memory and one
that reads it. Made serial, the threads of each stage run one after another
and the stages run in program order: the order the barriers impose. Every
shared-memory tile is still filled by the copy loop nest and read back at the
indices the compute uses, every register tile is still accumulated and
written back, so a wrong index, tile size or staging region gives a wrong
answer on the CPU too. (Shared and local buffers become ordinary memory.)

What it cannot catch: races (two threads writing one shared element, or a
barrier TVM would place wrongly, since serial stages never overlap);
misaligned vector loads (the CPU accepts them); shared-memory bank
conflicts and other performance bugs; the warp-shuffle lowering of
cross-thread reductions (they become serial reductions); and limits of the
device (``check_resources`` covers those).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import tvm
import tvm_ffi
from tvm import tirx
from tvm.s_tir.stmt import SBlock, SBlockRealize

from ...errors import BuildError, ScheduleError, tvm_message

#: per-block limits on every architecture kiln targets (sm_70 .. sm_90)
MAX_THREADS = 1024
MAX_SHARED = 48 * 1024       # without the opt-in to the larger dynamic shared memory
MAX_REGISTERS = 255
MAX_VECTOR_BYTES = 16        # the widest load a thread issues (float4; two float64)
REGISTER_OVERHEAD = 24       # addresses, loop counters and indices beside the local tiles


@dataclass
class Kernel:
    """Resources of one kernel (one top-level loop nest bound to the grid)."""

    threads: int
    shared_bytes: int
    registers: int           # an estimate: local buffer elements + REGISTER_OVERHEAD


def _walk(stmt, visit, loops=()):
    """Call ``visit(node, enclosing_loops)`` on every For and SBlock, pre-order."""
    if isinstance(stmt, tirx.For):
        visit(stmt, loops)
        _walk(stmt.body, visit, loops + (stmt,))
    elif isinstance(stmt, SBlockRealize):
        _walk(stmt.block, visit, loops)
    elif isinstance(stmt, SBlock):
        visit(stmt, loops)
        if stmt.init is not None:
            _walk(stmt.init, visit, loops)
        _walk(stmt.body, visit, loops)
    elif isinstance(stmt, tirx.SeqStmt):
        for s in stmt.seq:
            _walk(s, visit, loops)
    elif isinstance(stmt, tirx.IfThenElse):
        _walk(stmt.then_case, visit, loops)
        if stmt.else_case is not None:
            _walk(stmt.else_case, visit, loops)
    elif hasattr(stmt, "body"):  # LetStmt, AttrStmt, ...
        _walk(stmt.body, visit, loops)


def _extent(loop) -> int:
    e = loop.extent
    return int(e.value) if hasattr(e, "value") else 1


def _bytes(buf) -> int:
    n = math.prod(int(d.value) if hasattr(d, "value") else 1 for d in buf.shape)
    return n * max(1, tvm.DataType(str(buf.dtype)).bits // 8)


def _elements(buf) -> int:
    return math.prod(int(d.value) if hasattr(d, "value") else 1 for d in buf.shape)


def _kernels(func):
    root = func.body.block if isinstance(func.body, SBlockRealize) else func.body
    body = root.body
    return list(body.seq) if isinstance(body, tirx.SeqStmt) else [body], root


def _compacted(mod):
    """Buffers moved to where they are used and shrunk to the region used
    there: a shared tile then has its per-block size, a local one its
    per-thread size (what lowering does before code generation)."""
    st = tvm.s_tir.transform
    return tvm.transform.Sequential([st.LowerInitBlock(), st.PlanAndUpdateBufferAllocationLocation(),
                                     st.ConvertBlocksToOpaque(), st.CompactBufferAllocation()])(mod)


def resources(mod) -> list[Kernel]:
    """Threads, shared bytes and estimated registers of each kernel of ``mod``."""
    tops, _ = _kernels(_compacted(mod)["main"])
    out = []
    for top in tops:
        threads: dict[str, int] = {}
        sizes = {"shared": 0, "local": 0}

        def visit(node, loops):
            if isinstance(node, tirx.For) and node.thread_binding is not None:
                tag = node.thread_binding.thread_tag
                if tag.startswith("threadIdx"):
                    threads[tag] = max(threads.get(tag, 1), _extent(node))
            elif isinstance(node, SBlock):
                for buf in node.alloc_buffers:
                    if buf.scope().startswith("shared"):
                        sizes["shared"] += _bytes(buf)
                    elif buf.scope().startswith("local"):
                        sizes["local"] += _elements(buf)

        _walk(top, visit)
        out.append(Kernel(math.prod(threads.values()) if threads else 1, sizes["shared"],
                          sizes["local"] + REGISTER_OVERHEAD))
    return out


def check_resources(mod, target, op: str) -> list[Kernel]:
    """Raise ScheduleError when a kernel of ``mod`` exceeds the per-block limits."""
    mod = tvm.tirx.transform.ConvertSSA()(mod)  # an inlined let (fast exp) may be defined twice
    kernels = resources(mod)
    for i, k in enumerate(kernels):
        where = f"kernel {i}" if len(kernels) > 1 else "the kernel"
        if k.threads > MAX_THREADS:
            raise ScheduleError(f"{where} uses {k.threads} threads per block, expected at most {MAX_THREADS}",
                                op=op, arg="config")
        if k.shared_bytes > MAX_SHARED:
            raise ScheduleError(f"{where} uses {k.shared_bytes} bytes of shared memory per block, expected at most "
                                f"{MAX_SHARED}", op=op, arg="config")
        if k.registers > MAX_REGISTERS:
            raise ScheduleError(f"{where} needs about {k.registers} registers per thread, expected at most "
                                f"{MAX_REGISTERS}", op=op, arg="config")
    if not _tvm_verifies(mod, target, op):
        raise ScheduleError("TVM's GPU verification rejects the schedule (threads, shared memory or vector width "
                            "over the device limits)", op=op, arg="config")
    return kernels


def _tvm_verifies(mod, target, op: str) -> bool:
    """TVM's ``verify_gpu_code`` on the program lowered as far as MetaSchedule's
    ``VerifyGPUCode`` lowers it (threads, shared memory, vector width)."""
    st, tt = tvm.s_tir.transform, tvm.tirx.transform
    passes = tvm.transform.Sequential([
        st.LowerCrossThreadReduction(), st.LowerInitBlock(), st.PlanAndUpdateBufferAllocationLocation(),
        st.ConvertBlocksToOpaque(), st.ManifestSharedMemoryLocalStage(), st.CompactBufferAllocation(),
        st.LowerMatchBuffer(), st.InjectSoftwarePipeline(), st.LowerOpaqueBlock(), tt.FlattenBuffer(),
        tt.NarrowDataType(32), tt.StmtSimplify(), tt.VectorizeLoop(True), st.InjectVirtualThread(),
        tt.StorageRewrite(), st.MergeSharedMemoryAllocations()])
    try:
        lowered = passes(mod)
    except Exception as exc:  # noqa: BLE001 - TVM's lowering fails on some schedules (a region it cannot size)
        raise ScheduleError(f"TVM cannot lower the schedule: {tvm_message(exc, 200)}", op=op, arg="config") from exc
    limits = {"max_shared_memory_per_block": MAX_SHARED, "max_threads_per_block": MAX_THREADS,
              "max_thread_x": MAX_THREADS, "max_thread_y": MAX_THREADS, "max_thread_z": 64, "max_vthread": 8,
              "max_vector_bytes": MAX_VECTOR_BYTES}
    return all(tvm.s_tir.analysis.verify_gpu_code(f, limits) for f in lowered.functions.values())


def compile_ptx(mod, target, op: str) -> str:
    """Compile ``mod`` for ``target`` (a kiln CUDA target) and its CUDA source
    to PTX with nvcc; returns the PTX text."""
    from tvm.support import nvcc

    try:
        executable = tvm.compile(mod, target=target.tvm)
        source = cuda_source(executable.mod)
        with target.tvm:
            ptx = nvcc.compile_cuda(source, "ptx", arch=target.arch, compiler="nvcc")
    except Exception as exc:  # noqa: BLE001 - nvcc/TVM errors arrive as long tracebacks
        lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
        raise BuildError(f"CUDA compilation for {target.arch} failed: {lines[-1][:400] if lines else exc}",
                         op=op) from exc
    return ptx.decode() if isinstance(ptx, (bytes, bytearray)) else str(ptx)


def cuda_source(module) -> str:
    """The CUDA C of a compiled runtime module (its device import)."""
    for m in [module, *module.imports]:
        if m.kind == "cuda":
            return m.inspect_source()
    raise BuildError("the compiled module has no CUDA code", arg="target")


def on_cpu(mod):
    """``mod`` with every thread-bound loop made a serial loop (see the module
    docstring for why this keeps the program's meaning)."""

    def serial(stmt):
        if stmt.kind != tirx.ForKind.THREAD_BINDING:
            return stmt
        return tirx.For(stmt.loop_var, stmt.min, stmt.extent, tirx.ForKind.SERIAL, stmt.body, None, stmt.annotations)

    func = mod["main"]
    return tvm.IRModule({"main": func.with_body(tvm_ffi.structural_map(func.body, [(tirx.For, serial)]))})


def _runs(loops) -> int:
    """Executions of a block under ``loops``. Loops bound to the same thread
    tag are one hardware index (a cooperative copy nested under the compute's
    thread loops re-binds them), so each tag counts once, at its innermost extent."""
    runs, tags = 1, {}
    for lp in loops:
        if lp.thread_binding is not None:
            tags[lp.thread_binding.thread_tag] = _extent(lp)
        else:
            runs *= _extent(lp)
    return runs * math.prod(tags.values())


def run_on_cpu(mod, inputs, outputs) -> list:
    """Run ``on_cpu(mod)`` on this machine's CPU: ``inputs`` are numpy arrays,
    ``outputs`` the (shape, dtype) of each output; returns the outputs."""
    dev = tvm.cpu(0)
    executable = tvm.compile(on_cpu(mod), target=tvm.target.Target({"kind": "llvm"}))
    args = [tvm.runtime.tensor(a, dev) for a in inputs] + [tvm.runtime.empty(s, d, dev) for s, d in outputs]
    executable["main"](*args)
    return [a.numpy() for a in args[len(inputs):]]


def traffic(mod) -> dict:
    """Elements one run of ``mod`` loads, by where they go: each execution of
    a block writing a shared buffer fetches one element global->shared; each
    read of a shared buffer (a copy into registers, or a compute reading
    shared memory directly) is one shared->register load; every other read of
    a global buffer is a global->register load."""
    func = mod["main"]
    tops, root = _kernels(func)
    scopes = {b.name: b.scope() for b in root.alloc_buffers}
    counts = {"global_to_shared": 0, "global_to_register": 0, "shared_to_register": 0}

    def visit(node, loops):
        if not isinstance(node, SBlock):
            return
        for b in node.alloc_buffers:
            scopes[b.name] = b.scope()
        runs = _runs(loops)
        reads = [scopes.get(r.source.name, "global") for r in node.reads]
        if any(scopes.get(w.source.name, "global").startswith("shared") for w in node.writes):
            counts["global_to_shared"] += runs
            return
        counts["shared_to_register"] += runs * sum(1 for r in reads if r.startswith("shared"))
        counts["global_to_register"] += runs * sum(1 for r in reads if r == "global")

    for top in tops:
        _walk(top, visit)
    return counts
