"""``kiln predict``: run an exported model on a batch from a .npy or .npz file."""
from __future__ import annotations

import dataclasses
import json
import zipfile
import zlib

from ..errors import DataError
from .args import positive_int

NPY_MAGIC, ZIP_MAGICS = b"\x93NUMPY", (b"PK\x03\x04", b"PK\x05\x06")
# what numpy raises for a damaged .npy/.npz besides OSError: a short read, a bad zip or deflate stream
_DAMAGED = (EOFError, ValueError, zipfile.BadZipFile, zlib.error, KeyError)


def register(subparsers) -> None:
    parser = subparsers.add_parser("predict", help="run an exported model on inputs from a .npy or .npz file")
    parser.add_argument("model", help="a .so written by kiln train --export or kiln export (load only files you trust)")
    parser.add_argument("--input", required=True, metavar="X.npy",
                        help="a batch (N, ...) of the model's input: a .npy file, or a .npz holding it")
    parser.add_argument("--key", metavar="NAME",
                        help="the array to use from a .npz input that holds several (default: its only array)")
    parser.add_argument("--json", action="store_true",
                        help='print one JSON object: {"classes": [...], "scores": [[...], ...]} '
                             '(with --profile: {"rows": [...], "total_ms": ..., "batch": ...})')
    parser.add_argument("--profile", action="store_true",
                        help="instead of the scores, print the time of each kernel of a call on the input: "
                             "kernel, argument shapes, ms, share of the call")
    parser.add_argument("--repeat", type=positive_int, default=100, metavar="N",
                        help="with --profile: the calls to take the median of (default 100)")
    parser.set_defaults(func=run)


def read_input(path: str, key: str | None = None) -> np.ndarray:
    """The array in a .npy file, or array ``key`` of a .npz file (its only one
    when ``key`` is None). Raises ``DataError`` naming the file and the problem."""
    import numpy as np

    def fail(problem: str) -> DataError:
        return DataError(f"{path}: {problem}", arg="--input")

    try:
        with open(path, "rb") as f:
            head = f.read(len(NPY_MAGIC))
    except OSError as exc:
        raise fail(f"cannot read it ({exc.strerror or exc})") from exc
    if not head:
        raise fail("the file is empty, expected a .npy or .npz file (numpy.save / numpy.savez)")
    is_zip = head[:4] in ZIP_MAGICS
    if head != NPY_MAGIC and not is_zip:
        raise fail("not a .npy or .npz file (numpy.save / numpy.savez write them)")
    if key is not None and not is_zip:
        raise fail(f"got --key {key!r} for a .npy file, which holds one array; --key picks an array of a .npz file")
    try:
        if not is_zip:
            return np.load(path, allow_pickle=False)
        with np.load(path, allow_pickle=False) as npz:
            names = list(npz.files)
            if key is None and len(names) != 1:
                raise fail(f"the .npz file holds {len(names)} arrays ({', '.join(names) or 'none'}); "
                           "choose one with --key NAME")
            if key is not None and key not in names:
                raise fail(f"the .npz file has no array {key!r}; it holds: {', '.join(names) or 'none'}")
            return npz[key if key is not None else names[0]]
    except DataError:
        raise
    except (OSError, *_DAMAGED) as exc:
        raise fail(f"cannot be read as a numeric array: damaged, or not plain numbers "
                   f"({type(exc).__name__}: {str(exc)[:200]})") from exc


def run(args) -> int:
    import numpy as np

    from ..runtime.predictor import Predictor

    x = read_input(args.input, args.key)  # cheap, so a bad input is said before the model is loaded
    if args.profile:
        profile = Predictor(args.model).profile(x, repeat=args.repeat)
        print(json.dumps(dataclasses.asdict(profile)) if args.json else profile.table())
        return 0
    scores = Predictor(args.model)(x)
    classes = scores.argmax(axis=1).tolist() if scores.ndim == 2 else None
    if args.json:
        print(json.dumps({"classes": classes, "scores": scores.tolist()}))
    else:
        for i, row in enumerate(scores):
            print(f"{i}: class {classes[i] if classes else '-'}  scores {np.array2string(row, precision=3)}")
    return 0
