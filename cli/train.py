"""``kiln train``: train a model on compiled kernels, print needle's epoch table,
and export the trained model as one compiled module."""
from __future__ import annotations

import json
import sys
import time

import numpy as np

from ..runtime import cache


def register(subparsers) -> None:
    parser = subparsers.add_parser("train", help="train a model on digits or MNIST and export it")
    parser.add_argument("--dataset", choices=("digits", "mnist"), default="digits")
    parser.add_argument("--data-dir", help="folder with the MNIST IDX files (for --dataset mnist)")
    parser.add_argument("--model", choices=("mlp", "mlp-residual", "cnn"), default="mlp")
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--optimizer", choices=("sgd", "adam"), default="adam")
    parser.add_argument("--lr", type=float, default=None, help="learning rate (default: sgd 0.1, adam 0.01)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--export", metavar="MODEL.so", help="write the trained model as one compiled module")
    parser.add_argument("--save", metavar="CKPT.npz", help="write a checkpoint (weights .npz + spec .json)")
    parser.add_argument("--plot", metavar="LOSS.png", help="write the loss curves (needs matplotlib)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.set_defaults(func=run)


def _datasets(args):
    from ..nn import data

    flatten = args.model != "cnn"
    if args.dataset == "digits":
        return data.digits("train", flatten=flatten), data.digits("test", flatten=flatten)
    return (data.mnist(args.data_dir, "train", flatten=flatten), data.mnist(args.data_dir, "test", flatten=flatten))


def run(args) -> int:
    from .. import nn
    from ..nn import data, train
    from ..runtime.export import export
    from ..runtime.predictor import Predictor

    compiled_before, disk_before = cache.stats.compiled, cache.stats.disk_hits
    nn.init.manual_seed(args.seed)
    train_set, test_set = _datasets(args)
    x0 = np.asarray(train_set[0][0])
    model = train.build_model(args.model, x0.shape, classes=10)
    lr = args.lr if args.lr is not None else (0.1 if args.optimizer == "sgd" else 0.01)
    opt = (nn.optim.SGD(model.parameters(), lr=lr, momentum=0.9) if args.optimizer == "sgd"
           else nn.optim.Adam(model.parameters(), lr=lr))
    train_loader = data.DataLoader(train_set, batch_size=args.batch_size, shuffle=True, seed=args.seed)
    test_loader = data.DataLoader(test_set, batch_size=256)
    progress = None if args.json else _progress
    if not args.json:
        print(f"kiln train: {args.model} on {args.dataset} ({len(train_set)} train / {len(test_set)} test), "
              f"{args.optimizer} lr={lr}, batch {args.batch_size}, {args.epochs} epochs", file=sys.stderr)
    history = train.fit(model, train_loader, test_loader, opt, args.epochs, progress_factory=progress)
    result = {"model": args.model, "dataset": args.dataset, "epochs": [vars(e) for e in history.epochs],
              "test_error": history.epochs[-1].test_error if history.epochs else None}
    if args.save:
        spec = {"model": args.model, "in_shape": list(x0.shape), "classes": 10, "dataset": args.dataset}
        result["checkpoint"] = str(train.save_checkpoint(model, spec, args.save))
    if args.export:
        start = time.perf_counter()
        path = export(model, np.stack([test_set[i][0] for i in range(2)]), args.export)
        check = np.stack([test_set[i][0] for i in range(8)])
        predicted = Predictor(path)(check).argmax(axis=1)
        with nn.no_grad():
            expected = model(nn.Tensor(check)).numpy().argmax(axis=1)
        result["export"] = {"path": str(path), "seconds": time.perf_counter() - start,
                            "predictions": predicted.tolist(), "labels": [int(test_set[i][1]) for i in range(8)],
                            "matches_model": bool(np.array_equal(predicted, expected))}
    if args.plot:
        result["plot"] = _plot(history, args.plot)
    result["kernels"] = {"compiled": cache.stats.compiled - compiled_before,
                         "from_disk_cache": cache.stats.disk_hits - disk_before}
    if args.json:
        print(json.dumps(result))
        return 0
    print(history.table())
    if args.export:
        e = result["export"]
        print(f"exported {e['path']} ({e['seconds']:.1f}s); its predictions for 8 test images: {e['predictions']} "
              f"(labels {e['labels']}), same as the model: {'yes' if e['matches_model'] else 'NO'}")
    if args.plot:
        print(f"loss curve: {result['plot']}")
    k = result["kernels"]
    print(f"kernels: {k['compiled']} compiled, {k['from_disk_cache']} loaded from the disk cache")
    return 0


def _progress(epoch: int, total: int):
    from tqdm import tqdm

    return tqdm(total=total, desc=f"epoch {epoch}", unit="batch", leave=False, file=sys.stderr,
                disable=not sys.stderr.isatty())


def _plot(history, path: str) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "skipped: matplotlib is not installed"
    epochs = [e.epoch for e in history.epochs]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(epochs, [e.train_loss for e in history.epochs], label="train loss")
    ax.plot(epochs, [e.test_loss for e in history.epochs], label="test loss")
    ax.set_xlabel("epoch")
    ax.set_ylabel("softmax loss")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
