"""``kiln show``: an op's schedule (template, knob values, TVMScript) and generated code."""
from __future__ import annotations

import json

from ..runtime import build
from .args import add_op_arguments, input_dtypes, input_shapes, parse_attrs


def register(subparsers) -> None:
    parser = subparsers.add_parser("show", help="print an op's scheduled TVMScript (and generated source)")
    add_op_arguments(parser)
    parser.add_argument("--source", action="store_true", help="also print the generated source (LLVM IR / CUDA)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=run)


def run(args) -> int:
    shapes = input_shapes(args.op, args.shape)
    kernel = build(args.op, shapes, input_dtypes(args.dtype, len(shapes)), parse_attrs(args.op, args.attr),
                   target=args.target)
    info = {"op": kernel.op.name, "shapes": [list(s) for s in shapes], "dtypes": list(kernel.dtypes),
            "target": str(kernel.target), "template": kernel.template, "config": kernel.resolved_config(),
            "script": kernel.script()}
    if args.source:
        info["source"] = kernel.source()
    if args.json:
        print(json.dumps(info, default=list))
        return 0
    print(f"# {info['op']} {info['shapes']} {info['dtypes']} on {info['target']}")
    print(f"# template: {info['template']}")
    print("# config: " + ", ".join(f"{k}={v}" for k, v in info["config"].items()))
    print(info["script"])
    if args.source:
        print(info["source"])
    return 0
