"""A ``Graph`` as a Relax module of kiln-scheduled kernels.

Every node becomes one PrimFunc (``BlockBuilder.emit_te`` of its op's
``compute`` followed by its epilogue's), scheduled with the template dispatch
picks for its op; the epilogue's blocks are then inlined into the producer's
last block (``reverse_compute_inline``), so a fused chain writes memory once.
A reduction ending the epilogue (a pool, ``graph.fuse.fuse_pools``) and a
prologue (``fuse_prologues``) are computed inside the kernel's parallel
tasks (``graph.intask``).
A reshape becomes a Relax view (no kernel, no copy). Constants are Relax
constants, embedded in the module.
"""
from __future__ import annotations

import json
import warnings

import numpy as np
import tvm
from tvm import relax, te, tirx

from ..errors import ExportError, KilnError, tvm_message
from ..runtime.build import tuned_config
from ..runtime.lower import schedule
from ..schedules.generic import schedule_injective
from ..schedules.util import is_reduction
from ..te.quantize import fake_quantized
from ..te.shapes import is_static
from .align import input_params, unaligned
from .entries import ENTRIES, entry_configure, settle
from .intask import compute_in_task, reduce_in_task
from .ir import Graph, Node
from .qdq import DEQUANTIZE, QUANTIZE, grid
from .share import merge_part


def _compute(node: Node):
    """The node's tensor expression, on its operands: its prologue's (giving
    its first input), its op, then each epilogue op on the running result."""
    def compute(*tensors):
        rest = list(tensors)
        if node.prologue is not None:
            count = len(node.prologue.operands())
            rest = [_compute(node.prologue)(*rest[:count]), *rest[count:]]
        out = node.op.compute(*rest[:len(node.inputs)], **node.attrs)
        rest = rest[len(node.inputs):]
        ops, k = node.epilogue, 0
        while k < len(ops):
            op, attrs, others = ops[k]
            if _fake_pair(ops, k):  # one stage
                out, k = fake_quantized(out, attrs, ops[k + 1][1]), k + 2
                continue
            out = op.compute(out, *rest[:len(others)], **attrs)
            rest, k = rest[len(others):], k + 1
        return out
    return compute


def _fake_pair(ops: list, k: int) -> bool:
    """Whether epilogue entry ``k`` is a ``quantize`` that the next entry dequantizes on the same grid."""
    return ops[k][0] is QUANTIZE and k + 1 < len(ops) and ops[k + 1][0] is DEQUANTIZE and \
        grid(ops[k + 1][1]) == grid(ops[k][1])


def _epilogue_stages(node: Node) -> int:
    """How many stages ``node``'s epilogue computes in (a fake quantization pair is one)."""
    return len(node.epilogue) - sum(_fake_pair(node.epilogue, k) for k in range(len(node.epilogue)))


def _in_place(bb, node: Node, args: list, kernel: str):
    """``node``'s kernel called on its arguments followed by the inputs its
    outputs overwrite (the kernel's output parameters), as a
    ``call_tir_inplace`` whose outputs alias those inputs: the update writes
    the caller's buffers, as ``Tensor.apply_`` does eagerly."""
    call = bb.call_te(_compute(node), *args, primfunc_name_hint=kernel)
    gvar, (inputs,) = call.args[0], call.args[1:]
    count = len(node.outputs)
    aliases = [args[node.op.inplace[k]] for k in range(count)]
    out_types = list(call.ty_args[0].fields) if count > 1 else [call.ty_args[0]]
    return relax.op.call_tir_inplace(gvar, list(inputs.fields) + aliases,
                                     [len(inputs.fields) + k for k in range(count)], out_types)


def to_relax(graph: Graph, name: str = "main", suffix: str = "",
             unaligned_inputs: bool = False) -> tuple[tvm.IRModule, dict]:
    """The graph as the Relax function ``name`` (its kernels' names end in
    ``suffix``) and ``{PrimFunc name: node}``: one parameter per graph input,
    in order; the output, or a tuple of the outputs when there are several.
    With ``unaligned_inputs`` the kernels read the graph's inputs at any
    address their dtype allows (``graph.align``), not only 64-byte aligned."""
    bb = relax.BlockBuilder()
    params = [relax.Var(v.name or f"in{i}", relax.TensorType(list(v.shape), v.dtype))
              for i, v in enumerate(graph.inputs)]
    env, kernels = {id(v): p for v, p in zip(graph.inputs, params)}, {}

    def arg(v):
        if id(v) not in env:
            env[id(v)] = relax.const(v.data)
        return env[id(v)]

    with bb.function(name, params):
        with bb.dataflow():
            for node in graph.nodes:
                args = [arg(v) for v in node.operands()]
                if node.op.view and not node.epilogue:
                    out = bb.emit(relax.op.reshape(args[0], list(node.outputs[0].shape)))
                else:
                    kernel = f"{node.name}_{len(kernels)}{suffix}"
                    kernels[kernel] = node
                    if graph.writes_inputs(node):
                        out = bb.emit(_in_place(bb, node, args, kernel))
                    else:
                        out = bb.emit_te(_compute(node), *args, primfunc_name_hint=kernel)
                if len(node.outputs) == 1:
                    env[id(node.outputs[0])] = out
                else:
                    for i, v in enumerate(node.outputs):
                        env[id(v)] = bb.emit(relax.TupleGetItem(out, i))
            outs = [arg(v) for v in graph.outputs]
            result = bb.emit_output(outs[0] if len(outs) == 1 else relax.Tuple(outs))
        bb.emit_func_output(result)
    mod = bb.get()
    if unaligned_inputs:
        for kernel, indices in input_params(mod[name]).items():
            mod[kernel] = unaligned(mod[kernel], indices)
    return mod, kernels


def build_module(graph: Graph, meta: dict, target, dynamic_batch: bool = True, batches=()) -> tvm.IRModule:
    """The scheduled module: one Relax function per entry (``ENTRIES`` with a
    dynamic batch, else ``main`` alone), each with its own kernels, and
    ``kiln_metadata`` returning ``meta`` as UTF-8 JSON bytes with the entries
    listed (the Predictor picks the first that serves a batch). Each of
    ``batches`` (with a dynamic batch) gets an entry of its own before them,
    ``main_b<N>``: the graph at that batch, whose kernels of static shapes
    take their tuned configs. A kernel two entries schedule alike is
    compiled once (``graph.share``)."""
    parts, listed = [], []
    for batch in batches if dynamic_batch else ():
        parts.append((graph.specialized(batch), f"main_b{batch}", f"_b{batch}", entry_configure(batch)))
        listed.append({"name": f"main_b{batch}", "batch": batch})
    for name, max_batch, configure in ENTRIES if dynamic_batch else ENTRIES[-1:]:
        parts.append((graph, name, "" if name == "main" else name[4:], configure))
        listed.append({"name": name} if max_batch is None else {"name": name, "max_batch": max_batch})
    mod, seen = None, {}
    for part_graph, name, suffix, configure in parts:
        part, kernels = to_relax(part_graph, name, suffix, unaligned_inputs=True)
        mod = merge_part(mod, schedule_kernels(part, kernels, target, configure), seen)
    bb = relax.BlockBuilder()
    with bb.function("kiln_metadata", []):
        data = json.dumps({**meta, "entries": listed}).encode()
        bb.emit_func_output(relax.const(np.frombuffer(data, dtype=np.uint8)))
    for gv, func in bb.get().functions_items():
        mod[gv] = func
    return mod


def node_workload(node: Node):
    """The workload of ``node``'s own op (its epilogue aside): what a kernel
    of the node is tuned as."""
    return node.op.check([v.shape for v in node.inputs], [v.dtype for v in node.inputs], node.attrs)


def kernel_nodes(graph: Graph) -> list[Node]:
    """The nodes that become kernels (an ``Op.view`` op alone, a reshape, is a view)."""
    return [n for n in graph.nodes if not n.op.view or n.epilogue]


def tuned_of(workload, target) -> dict:
    """The best tuning record's config for a workload of static shapes (``{}``
    for none, or for symbolic shapes, which tuning never measures)."""
    return tuned_config(workload, target) if all(is_static(d) for s in workload.shapes for d in s) else {}


def schedule_kernels(mod: tvm.IRModule, kernels: dict, target, configure=None) -> tvm.IRModule:
    """Schedule every kernel PrimFunc of ``mod`` with kiln's templates: the
    best tuned config of a kernel's workload where the records hold one, else
    the defaults, or ``configure(knobs, workload)``'s values for the knobs
    the template declares."""
    for gv, func in list(mod.functions_items()):
        node = kernels.get(gv.name_hint)
        if not isinstance(func, tirx.PrimFunc) or node is None:
            continue
        workload = node_workload(node)
        blocks, reductions = _blocks(func)
        first = _block_count(node.prologue) if node.prologue is not None else 0
        head = blocks.index(node.op.name, first) if node.op.name in blocks[first:] \
            else len(blocks) - 1 - _epilogue_stages(node)
        tuned = tuned_of(workload, target)

        def lower_fn(config, func=func, workload=workload, block=blocks[head]):
            return schedule(workload, func, block, target, config)
        try:
            lowered = lower_fn(tuned) if tuned else settle(workload, configure, lower_fn)[0]
        except KilnError as exc:  # fits the op alone but not with its epilogue: the defaults serve
            if not tuned:
                raise
            warnings.warn(f"kiln: ignoring the tuning record for {node.name}: {exc}", RuntimeWarning, stacklevel=2)
            lowered = settle(workload, configure, lower_fn)[0]
        if node.epilogue:  # an op's own stages after its named block (layer_norm_grad's sums) are its template's
            tail = next((k for k in range(head + 1, len(blocks)) if reductions[k]), len(blocks))
            for name in blocks[head + 1:tail]:
                _inline_epilogue(lowered, name, node)
            if tail < len(blocks):
                reduce_in_task(lowered.sch, blocks[tail:], blocks[head], node)
        if first:
            compute_in_task(lowered, blocks[:first], blocks[head], node)
        mod[gv] = lowered.sch.mod["main"].with_attr("global_symbol", gv.name_hint)
    return mod


def _blocks(func) -> tuple[list[str], list[bool]]:
    """The names of the function's top-level blocks, in order, and whether each is a reduction."""
    sch = tvm.s_tir.Schedule(func)
    blocks = sch.get_child_blocks(sch.get_sblock("root"))
    return [sch.get(b).name_hint for b in blocks], [is_reduction(sch, b) for b in blocks]


def _block_count(node: Node) -> int:
    """How many top-level blocks ``node``'s tensor expression makes."""
    args = [te.placeholder(v.shape, v.dtype) for v in node.operands()]
    return len(_blocks(te.create_prim_func([*args, _compute(node)(*args)]))[0])


def _inline_epilogue(lowered, name: str, node: Node) -> None:
    """Inline an epilogue block into the producer's write-back; where the
    template left no block it can join, schedule it on its own (still the
    same kernel, one more pass over the output). A block the template
    already scheduled (a generic template inlines the op's own block into
    the epilogue's and schedules that) stays as it is: scheduling it again
    fused its row loop back into a vector that crossed rows."""
    sch = lowered.sch
    try:
        block = sch.get_sblock(name)
    except Exception:  # noqa: BLE001 - the template already inlined it into its own stages
        return
    if any(sch.get(loop).kind != tirx.ForKind.SERIAL for loop in sch.get_loops(block)):
        return  # the template scheduled it already (a generic template schedules every block it leaves)
    try:
        sch.reverse_compute_inline(block)
    except Exception:  # noqa: BLE001 - TVM refuses some producer shapes; the fallback is correct
        try:
            schedule_injective(sch, block, lowered.cfg, prefix=f"{name}_")
        except KilnError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise ExportError(f"could not schedule the fused {name} after {node.name}: {tvm_message(exc)}",
                              op=node.op.name, arg="model") from exc
