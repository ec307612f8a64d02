"""``kiln export``: a checkpoint written by ``kiln train --save`` as one compiled module."""
from __future__ import annotations

import json

import numpy as np


def register(subparsers) -> None:
    parser = subparsers.add_parser("export", help="compile a checkpoint from `kiln train --save` into one .so")
    parser.add_argument("checkpoint", help="the .npz written by kiln train --save (its .json spec beside it)")
    parser.add_argument("--out", required=True, metavar="MODEL.so")
    parser.add_argument("--json", action="store_true")
    parser.set_defaults(func=run)


def run(args) -> int:
    from ..nn.train import load_checkpoint
    from ..runtime.export import export

    model, spec = load_checkpoint(args.checkpoint)
    path = export(model, np.zeros((1, *spec["in_shape"]), "float32"), args.out)
    info = {"path": str(path), "model": spec["model"], "input_shape": [None, *spec["in_shape"]]}
    print(json.dumps(info) if args.json else f"exported {spec['model']} to {path} (input (N, "
          f"{', '.join(map(str, spec['in_shape']))}))")
    return 0
