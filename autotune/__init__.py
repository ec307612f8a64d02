"""Tuning a template's knobs: tasks, spaces, tuners, runners and records.

>>> task = kiln.autotune.Task.create("matmul", [(512, 512), (512, 512)])
>>> result = kiln.autotune.tune(task, trials=32, tuner="xgb")
>>> kiln.autotune.best(task)            # the best record, used by kiln.build

A whole model: ``extract`` its kernels, ``tune_model`` them under one budget
(``TaskScheduler``), then ``kiln.export``/``kiln.compile`` build it tuned;
``model_times`` measures it untuned against tuned.

>>> plan = kiln.autotune.tune_model(model, np.zeros((16, 1, 8, 8), "float32"), budget_s=600)
"""
from . import records as _records
from .extract import ModelTask, extract
from .model import model_times, tune_model
from .runners import Builder, LocalRunner, RPCRunner
from .scheduler import Schedule, TaskScheduler
from .space import Space
from .task import Task
from .tune import TuneResult, confirm, tune
from .tuners import TUNERS, GridTuner, RandomTuner, XGBTuner


def load_records(path, task: Task | None = None) -> list[dict]:
    """The records in ``path`` (of one task when given); torn lines are skipped with a warning."""
    return _records.load(path, task.key if task is not None else None)


def best(task: Task, path=None) -> dict | None:
    """The best record of ``task`` in ``path`` (default: kiln's records file)."""
    return _records.best(_records.load(_records.path_of(path), task.key))


def apply_records(path) -> None:
    """Make ``kiln.build`` use the best configs in ``path`` as well as the default records."""
    _records.apply(path)


__all__ = ["Task", "Space", "tune", "confirm", "TuneResult", "extract", "ModelTask", "TaskScheduler", "Schedule", "tune_model",
           "model_times", "Builder", "LocalRunner", "RPCRunner", "TUNERS", "RandomTuner",
           "GridTuner", "XGBTuner", "load_records", "best", "apply_records"]
