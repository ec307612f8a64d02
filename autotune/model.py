"""A whole model tuned on its hardware, and its time before and after.

``tune_model(model, example)`` extracts the model's tasks (``extract``) and
shares the budget among them (``TaskScheduler``); the records it writes are
what ``kiln.export`` and ``kiln.compile`` (``kiln train``) build the model's
kernels with from then on. ``model_times`` measures the real model both ways
— exported and run by a ``Predictor``, or one compiled training step — in
one process, interleaved, not as a sum of kernel estimates.
"""
from __future__ import annotations

import math
import tempfile
import time
from pathlib import Path

import numpy as np

from ..errors import AttrError

from .extract import extract
from .scheduler import Schedule, TaskScheduler


def tune_model(model, example, training: bool = False, trials: int | None = None, budget_s: float | None = None,
               records=None, resume: bool = False, tuner: str = "xgb", seed: int = 0, runner=None,
               callback=None, target=None, **scheduler_options) -> Schedule:
    """Tune the kernels ``model`` runs on batches like ``example`` (one
    training step's with ``training``) for ``trials`` measurements in all
    or ``budget_s`` seconds; returns the ``Schedule`` (per-task states and
    the estimated model time before and after)."""
    tasks = extract(model, example, training=training, target=target)
    scheduler = TaskScheduler(tasks, records=records, tuner=tuner, seed=seed, runner=runner, **scheduler_options)
    return scheduler.run(trials=trials, budget_s=budget_s, resume=resume, callback=callback)


def model_times(model, example, training: bool = False, repeat: int = 11, number: int | None = None,
                target=None, min_sample_s: float = 0.02) -> dict:
    """Median seconds per call of the model built untuned (the templates'
    defaults) and tuned (the records), measured interleaved in this process:
    ``{"untuned_s", "tuned_s"}``. Inference runs the exported module through
    a ``Predictor``; training runs compiled steps (``kiln.compile``) and
    leaves the model's weights as they were.

    Each of the ``repeat`` rounds times ``number`` calls of each build, one
    build after the other; ``number`` (default) is set so that a round of
    the slower build lasts ``min_sample_s``: on a host whose speed shifts
    for milliseconds at a time, rounds of a few calls (a small model's call
    takes tens of µs) fall in different phases, and the same kernels read
    1.1x apart."""
    if isinstance(example, dict):  # several inputs by name (an imported model's)
        if training:
            raise AttrError("training times take one input batch (and class labels); got inputs by name",
                            where="model_times", arg="example")
    else:
        example = np.asarray(example.numpy() if hasattr(example, "numpy") else example)
    calls, restore = (_training_calls if training else _inference_calls)(model, example, target)
    times = {name: [] for name in calls}
    try:
        if number is None:
            number = max(_calls_lasting(call, min_sample_s) for call in calls.values())
        for _ in range(repeat):
            for name, call in calls.items():
                call()  # warm
                start = time.perf_counter()
                for _ in range(number):
                    call()
                times[name].append((time.perf_counter() - start) / number)
    finally:
        restore()
    return {f"{name}_s": float(np.median(t)) for name, t in times.items()}


def _calls_lasting(call, seconds: float) -> int:
    """How many calls of ``call`` last ``seconds`` (from one warm call, timed after another)."""
    call()
    start = time.perf_counter()
    call()
    return max(1, math.ceil(seconds / max(time.perf_counter() - start, 1e-9)))


def _inference_calls(model, example, target) -> tuple:
    from ..graph.export import export
    from ..runtime.build import untuned
    from ..runtime.predictor import Predictor

    with tempfile.TemporaryDirectory(prefix="kiln-model-") as folder:  # loaded libraries outlive their files
        with untuned():
            plain = Predictor(export(model, example, Path(folder) / "untuned.so", batches=(), target=target))
        tuned = Predictor(export(model, example, Path(folder) / "tuned.so", target=target))
    if isinstance(example, dict):
        return {"untuned": lambda: plain(**example), "tuned": lambda: tuned(**example)}, lambda: None
    return {"untuned": lambda: plain(example), "tuned": lambda: tuned(example)}, lambda: None


def _training_calls(model, example, target) -> tuple:
    from ..nn import Tensor, optim
    from ..nn.compiled import Compiled
    from ..nn.modules import SoftmaxLoss
    from ..runtime.build import untuned

    loss_fn, saved = SoftmaxLoss(), model.state_dict()
    x, y = Tensor(example), Tensor(np.zeros(example.shape[0], "int32"))
    model.train()

    def step(compiled):
        def call():
            compiled(x, y).numpy()  # waits for the step
        return call

    optimizer = optim.Adam(model.parameters())
    with untuned():
        plain = Compiled(lambda a, b: loss_fn(model(a), b), optimizer, target)
        plain(x, y)  # traced and compiled untuned
    tuned = Compiled(lambda a, b: loss_fn(model(a), b), optimizer, target)
    tuned(x, y)
    return {"untuned": step(plain), "tuned": step(tuned)}, lambda: model.load_state_dict(saved)
