"""What a ``kiln train`` run shows and how it stops, for both its branches
(classifiers, ``train.py``; language models, ``train_text.py``): Ctrl-C at
a step boundary, the compile progress lines, the progress bar and the loss
plot."""
from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time
from typing import Callable, Iterator

from ..outputs import atomic_path


@contextlib.contextmanager
def stop_requests() -> Iterator[Callable[[], None]]:
    """A callback for between steps that raises ``KeyboardInterrupt`` once Ctrl-C
    was pressed, so a first Ctrl-C stops training at a step boundary (every
    parameter updated by the same steps); a second one interrupts at once."""
    requested = threading.Event()

    def between_steps() -> None:
        if requested.is_set():
            raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
        yield between_steps
        return

    def on_sigint(signum, frame):
        if requested.is_set():
            raise KeyboardInterrupt
        requested.set()
        start = "\n" if sys.stderr.isatty() else ""  # off the line the terminal's ^C is on
        print(f"{start}kiln train: stopping after this step (Ctrl-C again to stop at once)", file=sys.stderr,
              flush=True)

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield between_steps
    finally:
        signal.signal(signal.SIGINT, previous)


class CompileProgress:
    """While kernels are still being compiled ``after`` seconds into a run, say
    so on stderr — ``compiling kernels: N done (X s)``, at most every
    ``every`` seconds and once more when compiling has paused for ``quiet``
    seconds, X the time until the latest one finished — so a first run's
    compile time is not mistaken for a hang. Silent when compiling ends
    sooner (a warm kernel cache).

    Parameters
    ----------
    count : callable
        The number of kernels compiled so far (default: the kernel cache's count).
    """

    def __init__(self, count: Callable[[], int] | None = None, after: float = 3.0, every: float = 5.0,
                 quiet: float = 1.0, stream=None, poll: float = 0.25):
        self.count = count or _compiled_count
        self.after, self.every, self.quiet, self.poll, self.stream = after, every, quiet, poll, stream
        self.lines: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="kiln compile progress", daemon=True)

    def __enter__(self) -> "CompileProgress":
        self._base, self._start = self.count(), time.perf_counter()
        self._seen, self._reported, self._last_change = 0, 0, self._start
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._observe(time.perf_counter())
        if self._reported and self._seen != self._reported:
            self._report()

    def _watch(self) -> None:
        last_line = 0.0
        while not self._stop.wait(self.poll):
            now = time.perf_counter()
            self._observe(now)
            late = self._last_change - self._start >= self.after  # still compiling past `after`
            due = not self._reported or now - last_line >= self.every or now - self._last_change >= self.quiet
            if late and self._seen != self._reported and due:
                self._report()
                last_line = now

    def _observe(self, now: float) -> None:
        done = self.count() - self._base
        if done != self._seen:
            self._seen, self._last_change = done, now

    def _report(self) -> None:
        from tqdm import tqdm

        self._reported = self._seen
        line = f"compiling kernels: {self._seen} done ({self._last_change - self._start:.1f} s)"
        self.lines.append(line)
        tqdm.write(line, file=self.stream or sys.stderr)  # above a progress bar, if one is drawn


def _compiled_count() -> int:
    """Kernels compiled so far: the kernel cache's count (a CompileProgress's default)."""
    from ..runtime import cache

    return cache.stats.compiled


def progress_bar(epoch: int, total: int):
    from tqdm import tqdm

    return tqdm(total=total, desc=f"epoch {epoch}", unit="batch", leave=False, file=sys.stderr,
                disable=not sys.stderr.isatty())


def plot_losses(history, path: str, test_label: str = "test loss", ylabel: str = "softmax loss") -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epochs = [e.epoch for e in history.epochs]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(epochs, [e.train_loss for e in history.epochs], label="train loss")
    ax.plot(epochs, [e.test_loss for e in history.epochs], label=test_label)
    ax.set_xlabel("epoch")
    ax.set_ylabel(ylabel)
    ax.legend()
    fig.tight_layout()
    with atomic_path(path) as tmp:  # the temporary name has no suffix: say the type
        fig.savefig(tmp, format=path.rsplit(".", 1)[-1].lower())
    plt.close(fig)
    return path


def fit_until_stopped(args, model, loaders: tuple, optimizer, epochs: int, classes: int, row, spec: dict):
    """``nn.train.fit`` with each epoch's ``row(stats)`` printed as it ends (on
    stderr with ``--json``); the history, or None after a Ctrl-C, which writes
    the checkpoint with ``--save`` and says so."""
    from ..nn import train
    from ..nn.checkpoint import save_checkpoint

    table = sys.stderr if args.json else sys.stdout  # stdout carries only the JSON document with --json
    done = []

    def on_epoch(stats):
        done.append(stats)
        print(row(stats), file=table, flush=True)

    try:
        with stop_requests() as stop, CompileProgress():
            return train.fit(model, loaders[0], loaders[1], optimizer, epochs, progress_factory=progress_bar,
                             on_epoch=on_epoch, classes=classes, on_batch=stop, compiled=not args.eager)
    except KeyboardInterrupt:
        where = (f"checkpoint written to {save_checkpoint(model, args.save, spec)}" if args.save
                 else "nothing saved (--save CKPT.npz keeps a checkpoint on Ctrl-C)")
        print(f"kiln train: interrupted after {len(done)} of {epochs} epochs; {where}", file=sys.stderr, flush=True)
        return None


def export_checked(model, example, check, path: str, dynamic_seq: bool = False) -> dict:
    """Export ``model`` traced on ``example`` (its sequence length dynamic
    with ``dynamic_seq``), then run ``check`` through the module and the
    model: the path, the seconds it took, the module's argmax over the last
    axis (``predictions``) and whether the model's is the same (with
    ``dynamic_seq`` on ``check``'s first half of positions too)."""
    import numpy as np

    from .. import nn
    from ..graph.export import export
    from ..runtime.predictor import Predictor

    print(f"kiln train: exporting to {path}", file=sys.stderr, flush=True)
    start = time.perf_counter()
    written = export(model, example, path, dynamic_seq=dynamic_seq)
    seconds, predictor = time.perf_counter() - start, Predictor(written)
    checks = [check, check[:, :max(1, check.shape[1] // 2)]] if dynamic_seq else [check]
    predicted = [predictor(c).argmax(axis=-1) for c in checks]
    with nn.no_grad():
        expected = [model(nn.Tensor(c)).numpy().argmax(axis=-1) for c in checks]
    return {"path": str(written), "seconds": seconds, "predictions": predicted[0].tolist(),
            "matches_model": all(np.array_equal(p, e) for p, e in zip(predicted, expected))}


def report(args, result: dict, checkpoint_hint: str = "", export_sentence=None) -> int:
    """The run's end: ``result`` as one JSON document with ``--json``, else a
    line per output written (``export_sentence(result["export"])`` for the
    export) and the kernel counts."""
    import json

    if args.json:
        print(json.dumps(result))
        return 0
    if args.save:
        print(f"checkpoint: {result['checkpoint']}{checkpoint_hint}")
    if args.export:
        print(export_sentence(result["export"]))
    if args.plot:
        print(f"loss curve: {result['plot']}")
    k = result["kernels"]
    print(f"kernels: {k['compiled']} compiled, {k['from_disk_cache']} loaded from the disk cache")
    return 0
