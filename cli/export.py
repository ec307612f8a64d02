"""``kiln export``: a checkpoint written by ``kiln train --save`` as one compiled module.

Only the zoo models of ``kiln train`` can be rebuilt from a checkpoint's spec;
a model written in Python is exported from Python (``load_checkpoint(path,
model)``, then ``kiln.export``). Every problem with the files — missing,
truncated, corrupt, foreign, weights that do not fit, an unwritable ``--out``,
a ``--records`` file that is not one — is a ``kiln: error:`` naming the
file, found before compiling.
"""
from __future__ import annotations

import json

from .args import add_records_argument, apply_records_arg


def register(subparsers) -> None:
    parser = subparsers.add_parser("export", help="compile a checkpoint from `kiln train --save` into one .so")
    parser.add_argument("checkpoint", help="the .npz written by kiln train --save (its .npz.json spec beside it)")
    parser.add_argument("--out", required=True, metavar="MODEL.so",
                        help="where to write the compiled module (replaced atomically; run it with kiln predict)")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object (path, model, input shape) instead of a sentence")
    add_records_argument(parser)  # the tuned batch sizes get entries of their own (kiln.export's batches)
    parser.set_defaults(func=run)


def run(args) -> int:
    import numpy as np

    from ..nn.checkpoint import load_checkpoint
    from ..outputs import check_output_path
    from ..graph.export import export

    out = check_output_path(args.out, "--out")
    apply_records_arg(args)
    model, spec = load_checkpoint(args.checkpoint)
    path = export(model, np.zeros((1, *spec["in_shape"]), "float32"), out)
    info = {"path": str(path), "model": spec["model"], "input_shape": [None, *spec["in_shape"]]}
    print(json.dumps(info) if args.json else f"exported {spec['model']} to {path} (input (N, "
          f"{', '.join(map(str, spec['in_shape']))}))")
    return 0
