"""The benchmark suites behind ``kiln bench --suite``: ``cpu``, ``train``, ``inference``, ``models``, ``int8``.

``run`` measures the machine's header once, starts the numpy reference
process, imports PyTorch if it is installed (with kiln's thread count) and
runs the suites asked for; the result is plain data, ready for
``kiln.bench.report``.
"""
from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass

import tvm

from ...errors import AttrError
from ..machine import header
from ..reference import NumpyReference
from ..timing import check_repeat

SUITES = ("cpu", "train", "inference", "models", "int8")
REPEAT, QUICK_REPEAT = 10, 3


@dataclass
class Context:
    """What every suite gets: the numpy reference process, PyTorch (or None),
    the machine's header and kiln's thread count."""

    ref: NumpyReference
    torch: object
    header: dict
    threads: int


def parse_suites(text: str) -> list[str]:
    """``"cpu"``, ``"cpu,train"`` or ``"all"`` -> suite names, checked."""
    names = list(SUITES) if text.strip() == "all" else [t.strip() for t in text.split(",") if t.strip()]
    unknown = [n for n in names if n not in SUITES]
    if unknown or not names:
        raise AttrError(f"got {text!r}, expected one or more of {', '.join(SUITES)} (comma-separated) or all",
                        arg="--suite")
    return names


def optional_torch(threads: int):
    """PyTorch with ``threads`` intra-op threads, or None when it is not installed."""
    if importlib.util.find_spec("torch") is None:
        return None
    torch = importlib.import_module("torch")
    torch.set_num_threads(threads)
    return torch


def run(names: list[str], quick: bool = False, repeat: int | None = None) -> dict:
    """``{"header": ..., "suites": {name: [row, ...]}}`` for the suites ``names``."""
    repeat = check_repeat(repeat if repeat is not None else QUICK_REPEAT if quick else REPEAT)
    threads = tvm.runtime.num_threads()
    torch = optional_torch(threads)
    result = {"suites": {}, "quick": quick, "repeat": repeat}
    with NumpyReference(threads) as ref:
        result["header"] = header(ref.info, quick)
        context = Context(ref, torch, result["header"], threads)
        for name in names:
            result["suites"][name] = importlib.import_module(f"{__name__}.{name}").run(context, repeat, quick)
    return result
