"""``kiln ops``: the registered operators."""
from __future__ import annotations

import json


def register(subparsers) -> None:
    parser = subparsers.add_parser("ops", help="list registered ops")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=run)


def describe(name: str) -> dict:
    from ..te import get_op
    from ..te.attrs import REQUIRED

    op = get_op(name)
    attrs = {k: ("required" if a.default is REQUIRED else a.default) for k, a in op.attrs.items()}
    return {"name": name, "family": op.family, "inputs": "variadic" if op.arity is None else op.arity,
            "differentiable": op.differentiable, "dtypes": list(op.dtypes), "attrs": attrs}


def run(args) -> int:
    from ..te import list_ops

    rows = [describe(name) for name in list_ops()]
    if args.json:
        print(json.dumps({"ops": rows}))
        return 0
    print(f"{'op':<24}{'family':<12}{'inputs':<9}{'grad':<6}attrs")
    for r in rows:
        attrs = ", ".join(f"{k}={v}" for k, v in r["attrs"].items())
        print(f"{r['name']:<24}{r['family']:<12}{str(r['inputs']):<9}{'yes' if r['differentiable'] else 'no':<6}{attrs}")
    print(f"\n{len(rows)} ops")
    return 0
