"""What an exported model says of itself (its ``kiln_metadata``), read and
checked: its inputs and outputs, how its kernels read each input, what a call
returns, and its entry functions by batch size.

Format ``kiln-model-2`` (``FORMAT``, written by ``kiln.export``)::

    {"format": "kiln-model-2", "kiln": ..., "tvm": ..., "cpu": ..., "isa": [...],
     "inputs": [{"name": "ids", "shape": [null, 16], "dtype": "int64", "align": 8}, ...],
     "outputs": [{"name": "logits", "shape": [null, 4], "dtype": "float32"}, ...],
     "returns": "array" | "tuple" | "dict",
     "entries": [{"name": "main_small", "max_batch": 8}, ...],
     "max_seq": 256}

A shape's ``null`` is a dim set by the batch (an input's first dim) or by
the sequence length (an input's second dim, exported with ``dynamic_seq``;
``max_seq``, optional, bounds it where the model reads a table by position),
and an output's dims computed from them; ``align`` is the alignment, in bytes, at
which the kernels read the input (``graph/align.py``: its dtype's size).
``returns`` says how a call hands the outputs back: the one array, a tuple,
or a dict by output name (the forward returned a dict).

Format ``kiln-model-1`` (``LEGACY``, written before models had several
inputs) describes one input, ``x``, with ``input_shape``, ``input_dtype``
and ``input_align`` (optional: 64 bytes without it), and not its output; it
reads as one input and one output ``out`` of unrecorded shape and dtype.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ..errors import ExportError, ShapeError

FORMAT = "kiln-model-2"
LEGACY = "kiln-model-1"
RETURNS = ("array", "tuple", "dict")
# TVM's compiled kernels assume their buffers are 64-byte aligned (aligned vector loads: an unaligned
# input crashes the process); a module of format 1 without "input_align" declares nothing else
ALIGN = 64


class Spec(NamedTuple):
    """One input or output of a model: its name, its shape (``None`` for a
    dim the batch sets; the whole shape ``None`` where unrecorded) and its
    dtype (``None`` where unrecorded)."""

    name: str
    shape: tuple | None
    dtype: str | None


@dataclass(frozen=True)
class Signature:
    """A model's inputs (with the alignment its kernels read each at), its
    outputs, and what a call returns (one of ``RETURNS``)."""

    inputs: tuple
    aligns: tuple
    outputs: tuple
    returns: str
    max_seq: int | None = None


def read_signature(meta: dict, path) -> Signature:
    """The signature ``meta`` (a model's metadata, either format) describes;
    ``ExportError`` naming ``path`` for any malformed part."""
    def fail(problem: str) -> ExportError:
        return ExportError(f"{path} {problem}", where="Predictor", arg="path")

    if meta.get("format") == LEGACY:
        shape, align = meta.get("input_shape"), meta.get("input_align", ALIGN)
        meta = {"inputs": [{"name": "x", "shape": shape, "dtype": meta.get("input_dtype"), "align": align}],
                "outputs": [{"name": "out", "shape": None, "dtype": None}], "returns": "array"}
    elif meta.get("format") != FORMAT:
        raise fail(f"has format {meta.get('format')!r}, expected {FORMAT!r} (or {LEGACY!r})")
    inputs, aligns, names = [], [], set()
    for entry in _items(meta, "inputs", fail):
        name, shape, dtype, align = (entry.get(k) for k in ("name", "shape", "dtype", "align"))
        if not isinstance(name, str) or not name.isidentifier() or name in names:
            raise fail(f"has input name {name!r}, expected an identifier no other input has")
        names.add(name)
        if (not isinstance(shape, list) or not shape or None in shape[2:]
                or not all(d is None or (type(d) is int and d >= 0) for d in shape)):
            raise fail(f"has input {name!r} of shape {shape!r}: expected a batch (N, ...) whose first two dims "
                       "alone (the batch, the sequence) may be symbolic (null)")
        if type(align) is not int or align < 1:
            raise fail(f"has input {name!r} with align {align!r}, expected a positive int")
        inputs.append(Spec(name, tuple(shape), _dtype(dtype, name, fail)))
        aligns.append(align)
    outputs = []
    for entry in _items(meta, "outputs", fail):
        name, shape, dtype = (entry.get(k) for k in ("name", "shape", "dtype"))
        if not isinstance(name, str) or not name or any(o.name == name for o in outputs) or not (
                shape is None or isinstance(shape, list) and all(d is None or type(d) is int for d in shape)):
            raise fail(f"has output {entry!r}, expected {{'name': a name of its own, 'shape': a list of dims}}")
        outputs.append(Spec(name, None if shape is None else tuple(shape),
                            None if dtype is None else _dtype(dtype, name, fail)))
    returns = meta.get("returns")
    if returns not in RETURNS or returns != "dict" and (returns == "array") != (len(outputs) == 1):
        raise fail(f"returns {returns!r} for {len(outputs)} output(s), expected 'array' for one output, "
                   "'tuple' or 'dict' for several")
    max_seq = meta.get("max_seq")
    if max_seq is not None and (type(max_seq) is not int or max_seq < 1):
        raise fail(f"has max_seq {max_seq!r}, expected a positive int")
    return Signature(tuple(inputs), tuple(aligns), tuple(outputs), returns, max_seq)


def _items(meta: dict, key: str, fail) -> list:
    items = meta.get(key)
    if not isinstance(items, list) or not items or not all(isinstance(i, dict) for i in items):
        raise fail(f"has metadata {key!r} {items!r}, expected a non-empty list of objects")
    return items


def _dtype(dtype, name: str, fail) -> str:
    try:
        if isinstance(dtype, str):
            return str(np.dtype(dtype))
    except TypeError:
        pass
    raise fail(f"has {name!r} of dtype {dtype!r}, expected a numpy dtype name")


def parse_entries(meta: dict) -> list[tuple[int, int, str]]:
    """The model's entry functions as ``(lowest, highest batch, name)``, in
    the order to try.

    ``meta["entries"]`` (optional) lists ``{"name": ...}`` with either
    ``"batch"`` (the entry serves that batch size alone: kernels compiled for
    it, tuned ones where records existed) or ``"max_batch"`` (optional: it
    serves batches up to that; without either it serves any). Without the
    list, ``main`` serves every batch. Raises ``ExportError`` for a malformed
    list.
    """
    entries = meta.get("entries", [{"name": "main"}])
    if not isinstance(entries, list) or not entries:
        raise ExportError(f"metadata 'entries' is {entries!r}, expected a non-empty list", where="Predictor",
                          arg="path")
    parsed = []
    for entry in entries:
        limits = [entry.get(k) for k in ("batch", "max_batch")] if isinstance(entry, dict) else [None]
        if (not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or None not in limits
                or any(v is not None and (type(v) is not int or v < 1) for v in limits)):
            raise ExportError(f"metadata entry {entry!r} is not {{'name': str, 'batch' or 'max_batch': int >= 1 "
                              "(optional)}", where="Predictor", arg="path")
        exact, limit = limits
        parsed.append((exact or 1, exact or limit or sys.maxsize, entry["name"]))
    return parsed


def choose_entry(entries: list[tuple[int, int, str]], batch: int, arg: str = "x") -> str:
    """The first entry that serves ``batch``; ``ShapeError`` naming the input
    ``arg`` when none does (the model was exported for smaller batches only)."""
    for low, high, name in entries:
        if low <= batch <= high:
            return name
    raise ShapeError(f"got a batch of {batch}, the model serves batches up to {max(e[1] for e in entries)}",
                     where="Predictor", arg=arg)
