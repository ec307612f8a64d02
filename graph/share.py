"""One kernel for the entries that schedule it alike.

An export with a symbolic batch has one Relax function per batch range
(``graph.entries``), each with its kernels scheduled for its rows; where a
kernel's knob values come out the same in two entries (a convolution of
224x224 images runs the template's defaults at batch 1 and at 64), its
PrimFuncs are equal but for their names, and compiling both doubled the
export's LLVM time. ``merge_part`` adds an entry's functions to the module,
each of its kernels equal to one the module holds already (``tvm_ffi``'s
structural equality, names aside) dropped and its calls pointed at that one.
"""
from __future__ import annotations

import tvm
import tvm_ffi
from tvm import relax

_CALLS = ("relax.call_tir", "relax.call_tir_inplace")


def _bare(func):
    """The PrimFunc without its name, as two entries' kernels compare."""
    return func.without_attr("global_symbol")


@relax.expr_functor.mutator
class _Retarget(relax.PyExprMutator):
    """Points each kernel call at the kernel ``renamed`` maps its function to."""

    def __init__(self, mod, renamed: dict):
        super().__init__(mod)
        self.renamed = renamed
        self.calls = [tvm.ir.Op.get(name) for name in _CALLS]

    def visit_call_(self, call):
        call = super().visit_call_(call)
        if any(call.op.same_as(op) for op in self.calls) and call.args[0].name_hint in self.renamed:
            args = [self.renamed[call.args[0].name_hint], *call.args[1:]]
            return relax.Call(call.op, args, call.attrs, call.ty_args, call.span)
        return call


def merge_part(mod, part, seen: dict):
    """``mod`` with ``part``'s functions added (``part`` itself when ``mod``
    is None); ``seen`` maps each kernel's structural hash to the kernels
    (GlobalVar, bare PrimFunc) kept under it, and is updated."""
    renamed = {}
    for gv, func in part.functions_items():
        if not isinstance(func, tvm.tirx.PrimFunc):
            continue
        bare = _bare(func)
        kept = seen.setdefault(tvm_ffi.structural_hash(bare), [])
        twin = next((g for g, f in kept if tvm_ffi.structural_equal(f, bare)), None)
        if twin is None:
            kept.append((gv, bare))
        else:
            renamed[gv.name_hint] = twin
    if renamed:
        part = _retargeted(part, renamed)
    if mod is None:
        return part
    for gv, func in part.functions_items():
        if gv.name_hint not in renamed:
            mod[gv] = func
    return mod


def _retargeted(part, renamed: dict):
    """``part`` with its Relax functions calling the kept kernels."""
    mutator = _Retarget(part, renamed)
    out = tvm.IRModule()
    for gv, func in part.functions_items():
        if isinstance(func, relax.Function):
            out[gv] = mutator.visit_expr(func)
        elif gv.name_hint not in renamed:
            out[gv] = func
    return out
