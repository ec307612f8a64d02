"""``kiln train``: train a model on compiled kernels, print needle's epoch table
as each epoch ends, and export the trained model as one compiled module.

Nothing is lost to a mistake or a Ctrl-C: the arguments, every output path
(``--save``, ``--export``, ``--plot``, matplotlib for the plot), a
``--records`` file and the labels are checked before the first epoch; a
first Ctrl-C stops training at the next step boundary and, with ``--save``,
writes the checkpoint there (exit 130); a second Ctrl-C stops at once (the
checkpoint is then written as it stands).
"""
from __future__ import annotations

import argparse
import math
import sys

from ..errors import DataError, OutputError
from ..outputs import PLOT_HINT, check_output_path, check_plot_path
from .args import add_records_argument, apply_records_arg, positive_int, seed_int
from .train_run import export_checked, fit_until_stopped, plot_losses, report

CLASSES = 10
MODEL_CHOICES = ("mlp", "mlp-residual", "cnn", "resnet", "transformer", "lstm")


def _learning_rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"got {text!r}, expected a positive finite number")
    return value


def register(subparsers) -> None:
    parser = subparsers.add_parser("train", help="train a classifier on digits or MNIST, or a character language "
                                   "model on text, and export it")
    parser.add_argument("--dataset", choices=("digits", "mnist", "text"), default="digits",
                        help="digits: the 8x8 digits that scikit-learn ships; mnist: IDX files in --data-dir; text: "
                             "a character language model on --data-file, or on Python's own help texts "
                             "(pydoc_data.topics) without one (default digits)")
    parser.add_argument("--data-dir", metavar="DIR", help="folder with the MNIST IDX files (for --dataset mnist)")
    parser.add_argument("--data-file", metavar="FILE.txt", help="a UTF-8 text to train on (for --dataset text)")
    parser.add_argument("--seq-len", type=positive_int, default=None, metavar="N",
                        help="characters per training window (for --dataset text; default 64)")
    parser.add_argument("--model", choices=MODEL_CHOICES, default=None,
                        help="mlp: one hidden layer of 128; mlp-residual: plus a residual block; cnn: two conv + "
                             "BatchNorm layers and global average pooling; resnet: a conv stem and two residual "
                             "blocks with BatchNorm (default mlp); for --dataset text: transformer, 2 pre-norm "
                             "causal layers of 128 with 4 heads, or lstm, 2 layers of 256 (default transformer)")
    parser.add_argument("--epochs", type=positive_int, default=None, metavar="N",
                        help="passes over the training set (default 20; 2 for --dataset text)")
    parser.add_argument("--batch-size", type=positive_int, default=64, metavar="B",
                        help="training batch size (default 64)")
    parser.add_argument("--optimizer", choices=("sgd", "adam"), default="adam",
                        help="adam, or sgd with momentum 0.9 (needle's dampened form) (default adam)")
    parser.add_argument("--lr", type=_learning_rate, default=None,
                        help="learning rate (default: sgd 0.1, adam 0.01; for --dataset text sgd 0.5, adam 0.003)")
    parser.add_argument("--seed", type=seed_int, default=0, metavar="S",
                        help="seeds the initial weights and the shuffling (default 0)")
    parser.add_argument("--eager", action="store_true",
                        help="launch one kernel per op instead of compiling each training step into one module "
                             "call (kiln.compile)")
    parser.add_argument("--export", metavar="MODEL.so", help="write the trained model as one compiled module")
    parser.add_argument("--save", metavar="CKPT.npz",
                        help="write a checkpoint (weights .npz + .npz.json spec) after training, or at Ctrl-C")
    parser.add_argument("--plot", metavar="LOSS.png", help="write the loss curves (needs matplotlib: "
                                                           f"{PLOT_HINT}); the suffix picks the image type")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object on stdout at the end (the epoch table goes to stderr)")
    add_records_argument(parser)  # the training step and --export are built with its tuned configs
    parser.set_defaults(func=run)


def check_outputs(args) -> None:
    """Raise ``OutputError`` now, before any training, if an output cannot be written."""
    paths = {}
    for arg, path in (("--save", args.save), ("--export", args.export), ("--plot", args.plot)):
        if path is not None:
            paths[arg] = (check_plot_path if arg == "--plot" else check_output_path)(path, arg).resolve()
            if arg == "--save":
                paths["--save (its .npz.json)"] = check_output_path(f"{path}.json", arg).resolve()
    seen = {}
    for arg, path in paths.items():
        if path in seen:
            raise OutputError(f"{path} is also the file of {seen[path]}: give each output its own path", arg=arg)
        seen[path] = arg


def _datasets(args):
    from ..nn import data
    from ..nn.zoo import IMAGE_MODELS

    flatten = args.model not in IMAGE_MODELS
    if args.dataset == "digits":
        return data.digits("train", flatten=flatten), data.digits("test", flatten=flatten)
    return (data.mnist(args.data_dir, "train", flatten=flatten), data.mnist(args.data_dir, "test", flatten=flatten))


def run(args) -> int:
    import numpy as np

    from .. import nn
    from ..nn import data, train
    from ..nn.checkpoint import save_checkpoint
    from ..nn.data import check_labels
    from ..nn.zoo import TEXT_MODELS
    from ..runtime import cache

    check_outputs(args)
    apply_records_arg(args)
    if args.dataset == "text":
        if args.data_dir is not None:
            raise DataError("--data-dir holds MNIST's files; a text is given with --data-file", arg="--data-dir")
        from . import train_text

        args.seq_len = args.seq_len or 64
        return train_text.run(args)
    for arg, value in (("--data-file", args.data_file), ("--seq-len", args.seq_len)):
        if value is not None:
            raise DataError(f"{arg} applies to --dataset text, not {args.dataset}", arg=arg)
    args.model = args.model or "mlp"
    if args.model in TEXT_MODELS:
        raise DataError(f"--model {args.model} is a language model: train it with --dataset text", arg="--model")
    args.epochs = args.epochs or 20
    compiled_before, disk_before = cache.stats.compiled, cache.stats.disk_hits
    nn.init.manual_seed(args.seed)
    train_set, test_set = _datasets(args)
    for name, dataset in (("training", train_set), ("test", test_set)):
        if len(dataset) == 0:
            raise DataError(f"the {name} set of {args.dataset} is empty", arg="--dataset")
        labels = train.dataset_labels(dataset)
        if labels is not None:
            check_labels(labels, CLASSES, f"train ({args.dataset} {name} set)")
    x0 = np.asarray(train_set[0][0])
    spec = {"model": args.model, "in_shape": list(x0.shape), "classes": CLASSES, "dataset": args.dataset}
    model = train.build_model(args.model, x0.shape, classes=CLASSES)
    lr = args.lr if args.lr is not None else (0.1 if args.optimizer == "sgd" else 0.01)
    opt = (nn.optim.SGD(model.parameters(), lr=lr, momentum=0.9) if args.optimizer == "sgd"
           else nn.optim.Adam(model.parameters(), lr=lr))
    train_loader = data.DataLoader(train_set, batch_size=args.batch_size, shuffle=True, seed=args.seed)
    test_loader = data.DataLoader(test_set, batch_size=256)
    print(f"kiln train: {args.model} on {args.dataset} ({len(train_set)} train / {len(test_set)} test), "
          f"{args.optimizer} lr={lr}, batch {args.batch_size}, {args.epochs} epochs", file=sys.stderr, flush=True)
    print(train.EpochStats.HEADER, file=sys.stderr if args.json else sys.stdout, flush=True)
    history = fit_until_stopped(args, model, (train_loader, test_loader), opt, args.epochs, CLASSES,
                                train.EpochStats.row, spec)
    if history is None:
        return 130
    result = {"model": args.model, "dataset": args.dataset, "epochs": [vars(e) for e in history.epochs],
              "test_error": history.epochs[-1].test_error if history.epochs else None}
    if args.save:
        result["checkpoint"] = str(save_checkpoint(model, args.save, spec))
    if args.export:
        result["export"] = _export(model, test_set, args.export)
    if args.plot:
        result["plot"] = plot_losses(history, args.plot)
    result["kernels"] = {"compiled": cache.stats.compiled - compiled_before,
                         "from_disk_cache": cache.stats.disk_hits - disk_before}
    return report(args, result, export_sentence=lambda e: (
        f"exported {e['path']} ({e['seconds']:.1f}s); its predictions for 8 test images: {e['predictions']} "
        f"(labels {e['labels']}), same as the model: {'yes' if e['matches_model'] else 'NO'}"))


def _export(model, test_set, path: str) -> dict:
    """Export, then check the module's predictions for 8 test images against the model's."""
    import numpy as np

    count = min(8, len(test_set))
    example = np.stack([test_set[i][0] for i in range(min(2, len(test_set)))])
    checked = export_checked(model, example, np.stack([test_set[i][0] for i in range(count)]), path)
    return {**checked, "labels": [int(test_set[i][1]) for i in range(count)]}
