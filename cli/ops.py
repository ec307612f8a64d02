"""``kiln ops``: the registered operators."""
from __future__ import annotations

import json


def register(subparsers) -> None:
    parser = subparsers.add_parser("ops", help="list registered ops")
    parser.add_argument("--json", action="store_true", help="print one JSON object (with the ONNX and ATen ops the "
                        "frontends import)")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--onnx", action="store_true", help="list the ONNX op types kiln.frontend.from_onnx imports")
    which.add_argument("--aten", action="store_true", help="list the ATen ops kiln.frontend.from_torch imports")
    parser.set_defaults(func=run)


def describe(name: str) -> dict:
    from ..te import get_op
    from ..te.attrs import REQUIRED

    op = get_op(name)
    attrs = {k: ("required" if a.default is REQUIRED else a.default) for k, a in op.attrs.items()}
    return {"name": name, "family": op.family, "inputs": "variadic" if op.arity is None else op.arity,
            "differentiable": op.differentiable, "dtypes": list(op.dtypes), "attrs": attrs}


def run(args) -> int:
    from ..frontend import supported_aten_ops, supported_onnx_ops
    from ..te import list_ops

    if args.onnx or args.aten:
        names = supported_onnx_ops() if args.onnx else supported_aten_ops()
        if args.json:
            print(json.dumps({"onnx" if args.onnx else "aten": names}))
        else:
            print("\n".join(names))
            print(f"\n{len(names)} {'ONNX op types' if args.onnx else 'ATen ops'}")
        return 0
    rows = [describe(name) for name in list_ops()]
    if args.json:
        print(json.dumps({"ops": rows, "onnx": supported_onnx_ops(), "aten": supported_aten_ops()}))
        return 0
    header = ("op", "family", "inputs", "grad", "attrs")
    lines = [(r["name"], r["family"], str(r["inputs"]), "yes" if r["differentiable"] else "no",
              ", ".join(f"{k}={v}" for k, v in r["attrs"].items())) for r in rows]
    print(_table([header, *lines]))
    print(f"\n{len(rows)} ops")
    return 0


def _table(lines: list[tuple[str, ...]], gap: int = 2) -> str:
    """``lines`` as left-aligned columns, each as wide as its widest entry plus
    ``gap`` (the last unpadded): a long name never runs into the next column."""
    widths = [max(len(cells[i]) for cells in lines) + gap for i in range(len(lines[0]) - 1)]
    return "\n".join(("".join(f"{c:<{w}}" for c, w in zip(cells, widths)) + cells[-1]).rstrip() for cells in lines)
