"""Kernels that read a model's input where the caller's array has it.

TVM declares every buffer a kernel takes as 64-byte aligned, and LLVM turns
that promise into aligned vector loads (``vmovaps``), which fault on any
other address: an unaligned input crashes the process. numpy aligns its
arrays to 16 bytes (a large array's memory comes from ``mmap`` at 16 bytes
past a page), so most inputs are not 64-byte aligned, and a predictor that
needs the promise must copy every such input first: at batch 64 of a
784-wide input that copy and the cross-core traffic it causes cost more
than a tenth of the call.

An exported model's kernels therefore declare the parameters through which
they read the model's input (or a reshape of it) aligned only to their
element size; LLVM then emits unaligned loads for them, as fast as aligned
ones on data that happens to be aligned. ``input_params`` finds those
parameters; ``unaligned`` rewrites a kernel's declaration of them.
"""
from __future__ import annotations

import tvm
from tvm import relax

from ..errors import ExportError, tvm_message


def input_params(func: relax.Function) -> dict[str, list[int]]:
    """``{kernel name: [parameter index]}``: the parameters through which each
    kernel ``func`` calls reads one of ``func``'s inputs or a reshape of one
    (a call passes a tensor once however often its kernel uses it)."""
    aliases = list(func.params)
    found = {}

    def aliased(expr) -> bool:
        return any(expr.same_as(a) for a in aliases)

    for block in func.body.blocks:
        for binding in block.bindings:
            value = binding.value
            if not isinstance(value, relax.Call) or not hasattr(value.op, "name"):
                continue
            if value.op.name == "relax.reshape" and aliased(value.args[0]):
                aliases.append(binding.var)
            elif value.op.name in ("relax.call_tir", "relax.call_tir_inplace"):
                hits = [i for i, a in enumerate(value.args[1].fields) if aliased(a)]
                if hits:
                    found[value.args[0].name_hint] = hits
    return found


def unaligned(func: tvm.tirx.PrimFunc, indices: list[int]) -> tvm.tirx.PrimFunc:
    """``func`` with its parameters at ``indices`` declared aligned to their
    element size instead of 64 bytes (an unscheduled kernel, rewritten
    through its TVMScript, which TVM prints and parses back losslessly)."""
    text = func.script()
    for index in indices:
        param = func.params[index]
        text = _with_align(text, index, max(1, param.dtype.bits * param.dtype.lanes // 8))
    try:
        parsed = tvm.script.from_source(text)
    except Exception as exc:  # noqa: BLE001 - a parse failure is a bug to report with its cause
        raise ExportError(f"could not relax the input alignment of a kernel: {tvm_message(exc, 200)}",
                          where="kiln.export", arg="model") from exc
    return parsed if isinstance(parsed, tvm.tirx.PrimFunc) else parsed["main"]


def _with_align(text: str, index: int, align: int) -> str:
    """The script with ``align=`` added to the ``T.Buffer(...)`` of the
    function's parameter ``index`` (found by position: two parameters can
    share a name, printed as ``x`` and ``x_1``)."""
    pos = text.index("def main(") + len("def main(")
    depth, param = 1, 0
    while True:
        char = text[pos]
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if param == index and depth == 1:  # the parameter's T.Buffer( ... ) closes here
                return f"{text[:pos]}, align={align}{text[pos:]}"
        elif char == "," and depth == 1:
            param += 1
        pos += 1
