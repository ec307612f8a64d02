"""``kiln export``: a checkpoint written by ``kiln train --save``, or an ONNX
model, as one compiled module.

Only the zoo models of ``kiln train`` can be rebuilt from a checkpoint's spec;
a model written in Python is exported from Python (``load_checkpoint(path,
model)``, then ``kiln.export``). An ``.onnx`` file is imported
(``kiln.frontend.from_onnx``); its inputs' symbolic dims other than the batch
need ``--input-shape NAME=1x3x224x224``. Every problem with the files —
missing, truncated, corrupt, foreign, weights that do not fit, an
unsupported op, an unwritable ``--out``, a ``--records`` file that is not
one — is a ``kiln: error:`` naming the file, found before compiling.
"""
from __future__ import annotations

import dataclasses
import json

from ..errors import DataError, FrontendError
from .args import add_records_argument, apply_records_arg


def register(subparsers) -> None:
    parser = subparsers.add_parser("export", help="compile a checkpoint from `kiln train --save` or an .onnx model "
                                   "into one .so")
    parser.add_argument("checkpoint", metavar="MODEL",
                        help="the .npz written by kiln train --save (its .npz.json spec beside it), or an .onnx file")
    parser.add_argument("--out", required=True, metavar="MODEL.so",
                        help="where to write the compiled module (replaced atomically; run it with kiln predict)")
    parser.add_argument("--input-shape", action="append", default=[], metavar="NAME=DIMS",
                        help="an .onnx model's input shape, e.g. input_ids=Nx128 (repeated per input; N: any size): "
                             "needed for the dims the file leaves symbolic besides the batch, which stays dynamic")
    parser.add_argument("--int8", action="store_true",
                        help="quantize the convolutions and dense layers to int8 first (kiln.quantize), calibrated "
                             "on --calibration")
    parser.add_argument("--calibration", metavar="FILE.npy",
                        help="with --int8: representative inputs (N, ...) as a .npy or a .npz of one array (a .npz "
                             "with an array per input name for an .onnx model of several inputs), run in batches of "
                             "32 to choose each layer's input range")
    parser.add_argument("--observer", default="minmax", metavar="minmax|percentile|entropy",
                        help="with --int8: how an input range is chosen (default minmax; kiln.quantize checks it)")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object (path, model, inputs) instead of a sentence")
    add_records_argument(parser)  # the tuned batch sizes get entries of their own (kiln.export's batches)
    parser.set_defaults(func=run)


def run(args) -> int:
    from ..outputs import check_output_path

    out = check_output_path(args.out, "--out")
    apply_records_arg(args)
    if args.checkpoint.lower().endswith(".onnx"):
        return _export_onnx(args, out)
    if args.input_shape:
        raise FrontendError("--input-shape applies to an .onnx model; a checkpoint's spec gives its input shape",
                            where="kiln export", arg="--input-shape")
    from ..graph.export import export
    from ..nn.checkpoint import example_input, load_checkpoint, sequence_dynamic

    calibration = _calibration(args)  # read before the model: a bad file is said first
    model, spec = load_checkpoint(args.checkpoint)
    quantized = None
    if calibration is not None:
        quantized = model = _quantize(model, [(calibration[i:i + 32],) for i in range(0, len(calibration), 32)],
                                      args)
    dynamic = sequence_dynamic(spec)  # a transformer LM: any length up to its max_len
    path = export(model, example_input(spec, 1), out, dynamic_seq=dynamic)
    shape = [None, *spec["in_shape"]]
    if dynamic:
        shape[1] = None
    info = {"path": str(path), "model": spec["model"], "input_shape": shape}
    if quantized is not None:
        info["int8"] = [dataclasses.asdict(r) for r in quantized.report]
    dims = ", ".join("N" if k == 0 else "L" if d is None else str(d) for k, d in enumerate(shape))
    limit = f", L <= {model.max_len}" if dynamic else ""
    print(json.dumps(info) if args.json else f"exported {spec['model']} to {path} (input ({dims}){limit})")
    return 0


def _calibration(args, names=None):
    """``--calibration``'s array (with ``--int8``; ``{name: array}`` for
    ``names``, an imported model's inputs, when there are several), or None
    without ``--int8``."""
    if not args.int8:
        if args.calibration:
            raise DataError("--calibration applies with --int8", where="kiln export", arg="--calibration")
        return None
    if not args.calibration:
        raise DataError("--int8 needs --calibration FILE.npy: representative inputs to choose each layer's int8 "
                        "range from", where="kiln export", arg="--calibration")
    from .predict import read_input

    try:
        if names is None or len(names) == 1:
            return read_input(args.calibration, name=None if names is None else names[0])
        return {name: read_input(args.calibration, name=name) for name in names}
    except DataError as exc:
        raise DataError(exc.message, where="kiln export", arg="--calibration") from exc


def _quantize(model, batches: list, args):
    """``kiln.quantize`` of ``model`` on ``batches``, its report printed unless ``--json``."""
    from ..nn.quantized import quantize

    quantized = quantize(model, batches, observer=args.observer)
    if not args.json:
        print(quantized.summary())
    return quantized


def parse_input_shapes(items: list[str]) -> dict:
    """``NAME=1x3x224x224`` items as ``{name: dims}``."""
    shapes = {}
    for item in items:
        name, sep, text = item.partition("=")
        dims = text.lower().split("x") if text.strip() else []
        if not sep or not name or not dims or not all(d.isdigit() or d == "n" for d in dims):
            raise FrontendError(f"got {item!r}, expected NAME=DIMS such as input=Nx3x224x224 (N: any size)",
                                where="kiln export", arg="--input-shape")
        if name in shapes:
            raise FrontendError(f"input {name!r} given twice", where="kiln export", arg="--input-shape")
        shapes[name] = tuple(None if d == "n" else int(d) for d in dims)
    return shapes


def example_inputs(model, where: str = "kiln export") -> tuple[dict, bool]:
    """Zero arrays of the imported model's input shapes (batch 1 where the
    batch is symbolic), and whether every input has a dynamic batch."""
    import numpy as np

    arrays, dynamic = {}, True
    for spec in model.inputs:
        shape = list(spec.shape)
        if not shape or shape[0] is not None:
            dynamic = False
        if shape and shape[0] is None:
            shape[0] = 1
        unknown = [i for i, d in enumerate(shape) if d is None]
        if unknown:
            example = "x".join("N" if i == 0 and d is None else "128" if d is None else str(d)
                               for i, d in enumerate(spec.shape))
            raise FrontendError(f"input {spec.source!r} has symbolic dim(s) {unknown} besides the batch: give its "
                                f"shape, e.g. --input-shape {spec.source}={example} (N keeps the batch dynamic; "
                                f"the dims {unknown} as numbers)", where=where, arg="--input-shape")
        arrays[spec.name] = np.zeros(shape, spec.dtype)
    return arrays, dynamic


def _export_onnx(args, out) -> int:
    from ..frontend import from_onnx
    from ..graph.export import export

    model = from_onnx(args.checkpoint, parse_input_shapes(args.input_shape))
    example, dynamic = example_inputs(model)
    quantized, names = None, [spec.name for spec in model.inputs]
    calibration = _calibration(args, [spec.source for spec in model.inputs])
    if calibration is not None:
        arrays = [calibration] if not isinstance(calibration, dict) else [calibration[spec.source]
                                                                          for spec in model.inputs]
        if len({len(a) for a in arrays}) != 1:
            raise DataError(f"the arrays for {', '.join(names)} hold different numbers of examples "
                            f"({', '.join(str(len(a)) for a in arrays)})", where="kiln export", arg="--calibration")
        quantized = _quantize(model, [tuple(a[i:i + 32] for a in arrays) for i in range(0, len(arrays[0]), 32)], args)
    path = export(quantized or model, example, out, dynamic_batch=dynamic)
    inputs = {spec.name: [None if dynamic and i == 0 else int(d) for i, d in enumerate(example[spec.name].shape)]
              for spec in model.inputs}
    outputs = ["out"] if len(model.output_names) == 1 else model.output_names  # as Predictor names them
    info = {"path": str(path), "model": args.checkpoint, "inputs": inputs, "outputs": outputs}
    if quantized is not None:
        info["int8"] = [dataclasses.asdict(r) for r in quantized.report]
    shown = ", ".join(f"{name} ({', '.join('N' if d is None else str(d) for d in dims)})"
                      for name, dims in inputs.items())
    print(json.dumps(info) if args.json else f"exported {args.checkpoint} to {path} (inputs {shown})")
    return 0
