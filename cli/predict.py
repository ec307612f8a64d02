"""``kiln predict``: run an exported model on a .npy batch."""
from __future__ import annotations

import json

import numpy as np

from ..errors import ExportError
from ..runtime.predictor import Predictor


def register(subparsers) -> None:
    parser = subparsers.add_parser("predict", help="run an exported model on inputs from a .npy file")
    parser.add_argument("model", help="a .so written by kiln train --export or kiln export")
    parser.add_argument("--input", required=True, metavar="X.npy", help="a batch (N, ...) of the model's input")
    parser.add_argument("--json", action="store_true")
    parser.set_defaults(func=run)


def run(args) -> int:
    predictor = Predictor(args.model)
    try:
        x = np.load(args.input, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise ExportError(f"cannot read {args.input}: {exc}", op="predict", arg="--input") from exc
    scores = predictor(x)
    classes = scores.argmax(axis=1).tolist() if scores.ndim == 2 else None
    if args.json:
        print(json.dumps({"classes": classes, "scores": scores.tolist()}))
    else:
        for i, row in enumerate(scores):
            print(f"{i}: class {classes[i] if classes else '-'}  scores {np.array2string(row, precision=3)}")
    return 0
