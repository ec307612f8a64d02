"""State dicts: a module's parameters and buffers by name, in kiln's layout or
in PyTorch's.

The two layouts share the names (the attribute paths, as PyTorch's); they
differ where a module says so in its ``torch_layout``: ``Linear`` keeps its
weight (in, out), PyTorch (out, in); the batch norms save PyTorch's
``num_batches_tracked``, which kiln keeps outside its own state. The
knowledge sits on the module classes, so a model written in Python gets its
layers' conversions from the layers themselves, tied weights included (a
conversion belongs to a tensor, under whichever names it is reached).

The functions here work on the module walk (``module._walk``'s
``(name, item)`` pairs), so that this file needs no module class.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple

import numpy as np

from ..errors import AttrError, ShapeError
from .tensor import Tensor

LAYOUTS = ("kiln", "torch")


class LoadResult(NamedTuple):
    """What ``load_state_dict(..., strict=False)`` left alone."""

    missing_keys: list
    unexpected_keys: list


class Transposed:
    """A 2-D tensor that kiln keeps as the transpose of PyTorch's
    (``Linear.weight``: kiln (in, out), PyTorch (out, in))."""

    def to_torch(self, array: np.ndarray) -> np.ndarray:
        """kiln's array in PyTorch's layout."""
        return np.ascontiguousarray(array.T)

    def from_torch(self, array: np.ndarray) -> np.ndarray:
        """PyTorch's array in kiln's layout."""
        return np.ascontiguousarray(array.T)

    def torch_shape(self, shape: tuple) -> tuple:
        """The shape PyTorch's array has where kiln's has ``shape``."""
        return tuple(reversed(shape))


TRANSPOSED = Transposed()


@dataclass(frozen=True)
class TorchOnly:
    """An entry PyTorch saves that kiln keeps as a plain scalar attribute of
    the module, outside its own state (BatchNorm's ``num_batches_tracked``):
    loaded into the attribute and saved from it. A PyTorch state without the
    entry still loads, as it does into PyTorch (older versions lacked it).

    Parameters
    ----------
    dtype : str
        The dtype of the 0-d array saved.
    """

    dtype: str = "int64"


class _Entry(NamedTuple):
    """One name of a state dict in a given layout."""

    name: str
    shape: tuple                       # in the layout's terms
    read: Callable[[], np.ndarray]     # the current value, in the layout
    write: Callable[[np.ndarray], None]  # store a value given in the layout (already checked)
    optional: bool = False             # not reported missing


def _entries(walk: list, layout: str) -> list[_Entry]:
    """The state's names in ``layout``, in walk order; a module's ``TorchOnly``
    entries follow its own tensors (PyTorch's order: they are buffers)."""
    kinds = {id(m): m.torch_layout() if layout == "torch" else {} for _, m in walk if not isinstance(m, Tensor)}
    transposed = {id(getattr(m, attr)): kind for _, m in walk if not isinstance(m, Tensor)
                  for attr, kind in kinds[id(m)].items()
                  if isinstance(kind, Transposed) and isinstance(getattr(m, attr, None), Tensor)}
    out, pending = [], []
    for prefix, item in walk:
        if isinstance(item, Tensor):
            out.append(_tensor_entry(prefix, item, transposed.get(id(item))))
        else:
            out += pending
            pending = [_scalar_entry(prefix, item, attr, kind) for attr, kind in kinds[id(item)].items()
                       if isinstance(kind, TorchOnly)]
    return out + pending


def _tensor_entry(name: str, t: Tensor, kind: Transposed | None) -> _Entry:
    def write(array):
        t.data = (array if kind is None else kind.from_torch(array)).astype(t.dtype, copy=False)

    if kind is None:
        return _Entry(name, t.shape, t.numpy, write)
    return _Entry(name, kind.torch_shape(t.shape), lambda: kind.to_torch(t.numpy()), write)


def _scalar_entry(prefix: str, module, attr: str, kind: TorchOnly) -> _Entry:
    def write(array):
        setattr(module, attr, array.astype(kind.dtype).item())

    name = f"{prefix}.{attr}" if prefix else attr
    return _Entry(name, (), lambda: np.array(getattr(module, attr), dtype=kind.dtype), write, optional=True)


def _check_layout(layout, where: str) -> None:
    if layout not in LAYOUTS:
        raise AttrError(f"got {layout!r}, expected one of {', '.join(map(repr, LAYOUTS))}", where=where,
                        arg="layout")


def state_dict(walk: list, layout: str, where: str) -> dict[str, np.ndarray]:
    """``Module.state_dict``: every entry of ``layout`` by name, as numpy copies."""
    _check_layout(layout, where)
    return {e.name: e.read() for e in _entries(walk, layout)}


def load_state_dict(walk: list, state, strict: bool, layout: str, where: str) -> LoadResult:
    """``Module.load_state_dict``: all of ``state`` stored, or nothing and an
    error that lists every problem (see there)."""
    _check_layout(layout, where)
    if not hasattr(state, "keys"):
        raise AttrError(f"got {type(state).__name__}, expected a mapping of names to arrays", where=where,
                        arg="state")
    entries = _entries(walk, layout)
    values, missing, unexpected, problems = _fit(entries, state, strict)
    if problems:
        only_shapes = len(problems) == 1 and problems[0].startswith("mis-shaped")
        message = "; ".join(problems)
        if strict and (missing or unexpected):
            message += " (strict=False ignores missing and unexpected names)"
        other = LAYOUTS[1 - LAYOUTS.index(layout)]
        if not _fit(_entries(walk, other), state, strict)[3]:
            message += f"; it loads with layout={other!r}"
        raise (ShapeError if only_shapes else AttrError)(message, where=where, arg="state")
    for e in entries:
        if e.name in values:
            e.write(values[e.name])
    return LoadResult(missing, unexpected)


def _fit(entries: list[_Entry], state, strict: bool) -> tuple[dict, list, list, list]:
    """``(values, missing, unexpected, problems)`` of loading ``state`` into ``entries``."""
    names = {e.name for e in entries}
    missing = [e.name for e in entries if e.name not in state and not e.optional]
    unexpected = [str(k) for k in state.keys() if k not in names]
    values, shapes, kinds = {}, [], []
    for e in entries:
        if e.name not in state:
            continue
        arr = _as_array(state[e.name])
        if arr.dtype.kind not in "biuf":
            kinds.append(f"{e.name} ({arr.dtype})")
        elif arr.shape != e.shape:
            shapes.append(f"{e.name} (got {arr.shape}, expected {e.shape})")
        values[e.name] = arr
    problems = []
    if strict and missing:
        problems.append(f"missing keys: {', '.join(missing)}")
    if strict and unexpected:
        problems.append(f"unexpected keys: {', '.join(unexpected)}")
    if kinds:
        problems.append(f"not numeric: {', '.join(kinds)}")
    if shapes:
        problems.append(f"mis-shaped: {', '.join(shapes)}")
    return values, missing, unexpected, problems


def _as_array(value) -> np.ndarray:
    """A numpy array of a numpy value, a kiln Tensor or a PyTorch tensor (on any device)."""
    if hasattr(value, "detach"):  # kiln's and PyTorch's tensors: no autograd history to copy
        value = value.detach()
    if hasattr(value, "cpu") and callable(value.cpu):  # PyTorch: a GPU tensor's values to the host
        value = value.cpu()
    return np.asarray(value.numpy() if hasattr(value, "numpy") else value)
