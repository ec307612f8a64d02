"""``kiln predict``: run an exported model on inputs from .npy or .npz files.

A model of one input takes ``--input x.npy`` (or a .npz holding the batch:
its only array, or ``--key NAME``); a model of several takes each by name,
``--input ids=ids.npy --input mask=mask.npz`` (a .npz gives its array of that
name, or its only one). The outputs are printed (a row's class is its
argmax), or written with ``--out FILE.npz`` as one .npz of every output by
name. Every mistake — an unreadable file, an unknown or missing input name,
an input the model was not built for — is a ``kiln: error:`` (exit 2).
"""
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
    parser = subparsers.add_parser("predict", help="run an exported model on inputs from .npy or .npz files")
    parser.add_argument("model", help="a .so written by kiln train --export or kiln export (load only files you trust)")
    parser.add_argument("--input", required=True, action="append", metavar="[NAME=]FILE",
                        help="a batch (N, ...) of an input: a .npy file, or a .npz holding it. A model of one input "
                             "takes --input FILE; a model of several takes each as --input NAME=FILE (repeated; "
                             "NAME an identifier; a .npz gives its array NAME, or its only one)")
    parser.add_argument("--key", metavar="NAME",
                        help="the array to use from a single --input FILE.npz that holds several "
                             "(default: its only array)")
    parser.add_argument("--json", action="store_true",
                        help='print one JSON object: {"classes": [...], "scores": [[...], ...]} for one output, '
                             '{"outputs": {NAME: {"classes": ..., "scores": ...}, ...}} for several '
                             '(with --profile: {"rows": [...], "total_ms": ..., "batch": ...}; with --out: '
                             '{"path": ..., "outputs": {NAME: shape}})')
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--out", metavar="FILE.npz",
                        help="write the outputs to this .npz (replaced atomically), one array per output name "
                             "(numpy.load(FILE)[NAME]; a model's one unnamed output is 'out', several 'out0', "
                             "'out1'...), instead of printing them")
    action.add_argument("--profile", action="store_true",
                        help="instead of the scores, print the time of each kernel of a call on the input: "
                             "kernel, argument shapes, ms, share of the call")
    parser.add_argument("--repeat", type=positive_int, default=100, metavar="N",
                        help="with --profile: the calls to take the median of (default 100)")
    parser.set_defaults(func=run)


def read_input(path: str, key: str | None = None, name: str | None = None) -> np.ndarray:
    """The array in a .npy file, or array ``key`` of a .npz file (its array
    ``name`` when it holds one so named, else its only one, when ``key`` is
    None). Raises ``DataError`` naming the file and the problem."""
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
            if key is None and name in names:
                key = name
            if key is None and len(names) != 1:
                raise fail(f"the .npz file holds {len(names)} arrays ({', '.join(names) or 'none'})"
                           + (f", none named {name!r}" if name else "; choose one with --key NAME"))
            if key is not None and key not in names:
                raise fail(f"the .npz file has no array {key!r}; it holds: {', '.join(names) or 'none'}")
            return npz[key if key is not None else names[0]]
    except DataError:
        raise
    except (OSError, *_DAMAGED) as exc:
        raise fail(f"cannot be read as a numeric array: damaged, or not plain numbers "
                   f"({type(exc).__name__}: {str(exc)[:200]})") from exc


def read_inputs(values: list[str], key: str | None) -> dict:
    """``--input`` values read: ``{None: array}`` for one ``FILE``, else
    ``{NAME: array}`` for ``NAME=FILE`` values (a value whose part before
    ``=`` is no identifier is a file name)."""
    pairs = []
    for value in values:
        name, sep, path = value.partition("=")
        pairs.append((name, path) if sep and name.isidentifier() else (None, value))
    if len(pairs) == 1 and pairs[0][0] is None:
        return {None: read_input(pairs[0][1], key)}
    names = [name for name, _ in pairs]
    if None in names:
        raise DataError(f"got {len(pairs)} inputs, {names.count(None)} without a name: with several, give each as "
                        "--input NAME=FILE", arg="--input")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise DataError(f"got input {twice[0]!r} more than once", arg="--input")
    if key is not None:
        raise DataError("--key picks the array of a single --input FILE; a NAME=FILE .npz gives its array NAME, "
                        "or its only one", arg="--key")
    return {name: read_input(path, name=name) for name, path in pairs}


def run(args) -> int:
    import numpy as np

    from ..outputs import atomic_path, check_output_path
    from ..runtime.predictor import Predictor

    out = check_output_path(args.out, "--out") if args.out else None
    given = read_inputs(args.input, args.key)  # cheap, so a bad input is said before the model is loaded
    predictor = Predictor(args.model)
    names = [spec.name for spec in predictor.inputs]
    if None in given:
        if len(names) > 1:
            raise DataError(f"the model takes {len(names)} inputs ({', '.join(names)}): give each as "
                            "--input NAME=FILE", arg="--input")
        given = {names[0]: given[None]}
    unknown = [name for name in given if name not in names]
    missing = [name for name in names if name not in given]
    if unknown or missing:
        problem = f"the model has no input {unknown[0]!r}" if unknown else f"missing --input {missing[0]}=FILE"
        raise DataError(f"{problem}; its inputs: {', '.join(names)}", arg="--input")
    arrays = [given[name] for name in names]  # by position: an input may be named like a keyword (repeat)
    if args.profile:
        profile = predictor.profile(*arrays, repeat=args.repeat)
        print(json.dumps(dataclasses.asdict(profile)) if args.json else profile.table())
        return 0
    result = predictor(*arrays)
    outputs = result if isinstance(result, dict) else dict(zip(
        [spec.name for spec in predictor.outputs], result if isinstance(result, tuple) else (result,)))
    if out is not None:
        with atomic_path(out, suffix=".npz") as tmp:  # an OSError becomes an OutputError naming the path
            np.savez(tmp, **outputs)
        shapes = {name: list(array.shape) for name, array in outputs.items()}
        print(json.dumps({"path": str(out), "outputs": shapes}) if args.json else
              f"wrote {', '.join(f'{n} {tuple(s)}' for n, s in shapes.items())} to {out}")
        return 0
    if args.json:
        scored = {name: _scored(array) for name, array in outputs.items()}
        print(json.dumps(next(iter(scored.values())) if len(scored) == 1 else {"outputs": scored}))
        return 0
    for name, array in outputs.items():
        if len(outputs) > 1:
            print(f"{name} {array.shape}:")
        for line in _rows(array):
            print(("  " if len(outputs) > 1 else "") + line)
    return 0


def _scored(scores) -> dict:
    """An output as JSON: each row's class (its argmax, for a 2-D output) and the scores."""
    return {"classes": scores.argmax(axis=1).tolist() if scores.ndim == 2 else None, "scores": scores.tolist()}


def _rows(scores) -> list[str]:
    import numpy as np

    classes = scores.argmax(axis=1).tolist() if scores.ndim == 2 else None
    return [f"{i}: class {classes[i] if classes else '-'}  scores {np.array2string(row, precision=3)}"
            for i, row in enumerate(scores)]
