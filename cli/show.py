"""``kiln show``: an op's schedule (template, knob values, TVMScript) and generated code."""
from __future__ import annotations

import json
from dataclasses import asdict

from ..errors import AttrError
from .args import add_op_arguments, apply_records_arg, input_dtypes, input_shapes, parse_attrs


def register(subparsers) -> None:
    parser = subparsers.add_parser("show", help="print an op's scheduled TVMScript (and generated source)")
    add_op_arguments(parser)
    parser.add_argument("--source", action="store_true", help="also print the generated source (LLVM IR / CUDA)")
    parser.add_argument("--traffic", action="store_true",
                        help="CUDA: the per-block resources and the global->shared / shared->register loads")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=run)


def run(args) -> int:
    from ..runtime import build

    apply_records_arg(args)
    shapes = input_shapes(args.op, args.shape)
    kernel = build(args.op, shapes, input_dtypes(args.dtype, len(shapes)), parse_attrs(args.op, args.attr),
                   target=args.target)
    info = {"op": kernel.op.name, "shapes": [list(s) for s in shapes], "dtypes": list(kernel.dtypes),
            "target": str(kernel.target), "template": kernel.template, "config": kernel.resolved_config(),
            "tuned": bool(kernel.config), "script": kernel.script()}
    if args.source:
        info["source"] = kernel.source()
    if args.traffic:
        info.update(_traffic(kernel))
    if args.json:
        print(json.dumps(info, default=list))
        return 0
    print(f"# {info['op']} {info['shapes']} {info['dtypes']} on {info['target']}")
    print(f"# template: {info['template']}")
    source = "tuned, from the records" if info["tuned"] else "the template's defaults"
    print(f"# config ({source}): " + ", ".join(f"{k}={v}" for k, v in info["config"].items()))
    print(info["script"])
    if args.source:
        print(info["source"])
    if args.traffic:
        for i, k in enumerate(info["kernels"]):
            print(f"# kernel {i}: {k['threads']} threads/block, {k['shared_bytes']} B shared/block, "
                  f"~{k['registers']} registers/thread")
        t = info["traffic"]
        print(f"# traffic: global->shared {t['global_to_shared']:,} elements, "
              f"shared->register {t['shared_to_register']:,} elements, "
              f"global->register {t['global_to_register']:,} elements")
    return 0


def _traffic(kernel) -> dict:
    from ..schedules.cuda import check

    if kernel.target.kind != "cuda":
        raise AttrError("the traffic model is for CUDA schedules: add --target cuda", arg="--traffic")
    mod = kernel.ir()
    return {"kernels": [asdict(k) for k in check.resources(mod)], "traffic": check.traffic(mod)}
