"""``kiln bench``: an op's kernel against numpy, measured in the same run."""
from __future__ import annotations

import json

from ..runtime.measure import measure
from .args import add_op_arguments, input_dtypes, input_shapes, parse_attrs


def register(subparsers) -> None:
    parser = subparsers.add_parser("bench", help="time an op's kernel against numpy (GFLOPS or GB/s, ratio)")
    add_op_arguments(parser)
    parser.add_argument("--repeat", type=int, default=10, help="timed repeats for each side (default 10)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=run)


def run(args) -> int:
    shapes = input_shapes(args.op, args.shape)
    res = measure(args.op, shapes, input_dtypes(args.dtype, len(shapes)), parse_attrs(args.op, args.attr),
                  target=args.target, repeat=args.repeat)
    if args.json:
        print(json.dumps(res, default=list))
        return 0
    key = "gflops" if res["unit"] == "GFLOPS" else "gbps"
    print(f"{res['op']} {res['shapes']} {res['dtypes']} on {res['target']}, {res['threads']} threads")
    for side in ("kiln", "numpy"):
        s = res[side]
        print(f"  {side:<6} {s[key]:10.1f} {res['unit']:<7} median {s['median_s'] * 1e3:.3f} ms "
              f"(min {s['min_s'] * 1e3:.3f}, max {s['max_s'] * 1e3:.3f})")
    print(f"  ratio  {res['ratio']:.2f}x (kiln speed / numpy speed)")
    return 0
