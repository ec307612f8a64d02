"""Training loops and the models ``kiln train`` knows (needle's ``epoch`` /
``train``), plus checkpoints: weights in ``.npz`` beside a JSON spec, no pickle."""
from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import AttrError
from . import modules as M
from .tensor import Tensor, no_grad

MODELS = ("mlp", "mlp-residual", "cnn")


def build_model(name: str, in_shape: tuple, classes: int, hidden: int = 128) -> M.Module:
    """A model from the zoo for inputs of ``in_shape`` (without the batch dim)."""
    if name == "mlp":
        return M.Sequential(M.Flatten(), M.Linear(int(np.prod(in_shape)), hidden), M.ReLU(), M.Linear(hidden, classes))
    if name == "mlp-residual":
        return M.Sequential(M.Flatten(), M.Linear(int(np.prod(in_shape)), hidden), M.ReLU(),
                            M.Residual(M.Sequential(M.Linear(hidden, hidden), M.ReLU())), M.Linear(hidden, classes))
    if name == "cnn":
        channels = in_shape[0]
        return M.Sequential(M.Conv(channels, 16, 3), M.BatchNorm2d(16), M.ReLU(), M.Conv(16, 32, 3),
                            M.BatchNorm2d(32), M.ReLU(), M.GlobalAvgPool2d(), M.Linear(32, classes))
    raise AttrError(f"got {name!r}, expected one of {', '.join(MODELS)}", op="train", arg="model")


@dataclass
class EpochStats:
    epoch: int
    train_loss: float
    train_error: float
    test_loss: float
    test_error: float
    seconds: float


@dataclass
class History:
    epochs: list = field(default_factory=list)

    def table(self) -> str:
        lines = [f"{'epoch':>5} | {'train loss':>10} | {'train err':>9} | {'test loss':>9} | {'test err':>8} | {'time':>6}",
                 "-" * 64]
        for e in self.epochs:
            lines.append(f"{e.epoch:>5} | {e.train_loss:>10.4f} | {e.train_error:>9.4f} | {e.test_loss:>9.4f} | "
                         f"{e.test_error:>8.4f} | {e.seconds:>5.1f}s")
        return "\n".join(lines)


def run_epoch(model, loader, loss_fn, optimizer=None, progress=None) -> tuple[float, float]:
    """One pass over ``loader``: (mean loss, error rate); trains when an optimizer is given."""
    model.train(optimizer is not None)
    total_loss, wrong, seen = 0.0, 0, 0
    for x, y in loader:
        xs, ys = Tensor(x), Tensor(np.asarray(y, dtype="int32"))
        if optimizer is not None:
            optimizer.zero_grad()
            logits = model(xs)
            loss = loss_fn(logits, ys)
            loss.backward()
            optimizer.step()
        else:
            with no_grad():
                logits = model(xs)
                loss = loss_fn(logits, ys)
        n = len(y)
        total_loss += loss.item() * n
        wrong += int(np.sum(logits.numpy().argmax(axis=1) != y))
        seen += n
        if progress is not None:
            progress.update(1)
    return total_loss / max(seen, 1), wrong / max(seen, 1)


def fit(model, train_loader, test_loader, optimizer, epochs: int, loss_fn=None, progress_factory=None,
        on_epoch=None) -> History:
    loss_fn = loss_fn or M.SoftmaxLoss()
    history = History()
    for epoch in range(1, epochs + 1):
        start = time.perf_counter()
        bar = progress_factory(epoch, len(train_loader)) if progress_factory else None
        train_loss, train_err = run_epoch(model, train_loader, loss_fn, optimizer, bar)
        if bar is not None:
            bar.close()
        test_loss, test_err = run_epoch(model, test_loader, loss_fn)
        stats = EpochStats(epoch, train_loss, train_err, test_loss, test_err, time.perf_counter() - start)
        history.epochs.append(stats)
        if on_epoch:
            on_epoch(stats)
    model.eval()
    return history


def save_checkpoint(model, spec: dict, path) -> Path:
    """Weights as ``<path>`` (.npz) and the model spec as ``<path>.json``, each
    written to a temporary file and renamed, so a crash leaves no torn file."""
    path = Path(path)
    arrays = {f"p{i}": p.numpy() for i, p in enumerate(model.parameters())}
    arrays.update({f"b{i}": b for i, b in enumerate(_buffers(model))})
    _atomic(path, lambda f: np.savez(f, **arrays))
    _atomic(Path(str(path) + ".json"), lambda f: f.write(json.dumps(spec).encode()))
    return path


def _atomic(path: Path, write) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def load_checkpoint(path):
    """(model, spec) rebuilt from a checkpoint written by ``save_checkpoint``."""
    path = Path(path)
    spec = json.loads(Path(str(path) + ".json").read_text())
    model = build_model(spec["model"], tuple(spec["in_shape"]), spec["classes"])
    with np.load(path, allow_pickle=False) as data:
        for i, p in enumerate(model.parameters()):
            p.data = data[f"p{i}"]
        for i, holder in enumerate(_buffer_holders(model)):
            holder[0].__dict__[holder[1]] = Tensor(data[f"b{i}"])
    model.eval()
    return model, spec


def _buffer_holders(model):
    """(module, attribute) of the non-trained state (BatchNorm running statistics)."""
    for m in _all_modules(model):
        for name in ("running_mean", "running_var"):
            if hasattr(m, name):
                yield m, name


def _buffers(model):
    return [getattr(m, name).numpy() for m, name in _buffer_holders(model)]


def _all_modules(model):
    yield from M._modules(model)
