"""Checkpoints: a model's ``state_dict`` as ``<path>`` (an ``.npz`` of named
arrays, no pickle) and a JSON description as ``<path>.json``.

The JSON holds the format name, the SHA-256 of the ``.npz`` it describes (a
crash between the two renames, or a file swapped by hand, is detected), the
names of the arrays, and a free-form ``spec``; ``kiln train --save`` puts the
model-zoo name, input shape and class count there, which is what lets
``kiln export CKPT`` rebuild the model. A model written in Python is rebuilt
by its own code instead::

    model = MyNet()
    load_checkpoint("ckpt.npz", model)        # or model.load_state_dict(read_checkpoint(path)[0])
    kiln.export(model, example, "model.so")

Checkpoints of the first format (arrays ``p0..pN`` for the parameters and
``b0..bN`` for the buffers, in walk order, and the spec as the whole JSON)
still load: the positions map onto the model's names.
"""
from __future__ import annotations

import hashlib
import json
import re
import zipfile
import zlib
from pathlib import Path

import numpy as np

from ..errors import CheckpointError, KilnError
from ..outputs import atomic_path
from . import modules as M

FORMAT = "kiln-checkpoint-2"
_POSITIONAL = re.compile(r"[pb]\d+")


def save_checkpoint(model: M.Module, path, spec: dict | None = None) -> Path:
    """Write ``model.state_dict()`` to ``path`` and its description to ``path + ".json"``.

    Parameters
    ----------
    model : Module
    path : str or Path
        Conventionally ``*.npz``; both files are written atomically.
    spec : dict, optional
        JSON-serializable facts about the model (``kiln train`` stores
        ``model``, ``in_shape``, ``classes``, ``dataset``).

    Returns
    -------
    Path
        ``path``.
    """
    path = Path(path)
    state = model.state_dict()
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            np.savez(f, **state)
    meta = {"format": FORMAT, "sha256": _sha256(path), "arrays": sorted(state), "spec": spec or {}}
    with atomic_path(_meta_path(path)) as tmp:
        Path(tmp).write_text(json.dumps(meta, indent=1))
    return path


def read_checkpoint(path) -> tuple[dict[str, np.ndarray], dict]:
    """``(state, spec)`` of a checkpoint: the named arrays and the saved spec.

    Raises
    ------
    CheckpointError
        Either file is missing, unreadable, corrupt or not kiln's format, or
        the ``.npz`` is not the one its ``.json`` describes.
    """
    path = Path(path)
    state = _read_arrays(path)
    meta = _read_meta(path)
    if "format" not in meta:  # the first format: the JSON is the spec
        return state, meta
    if meta.get("format") != FORMAT or not isinstance(meta.get("spec"), dict):
        raise CheckpointError(f"{_meta_path(path)} has format {meta.get('format')!r}, expected {FORMAT!r} with "
                              "a 'spec' object")
    if meta.get("sha256") != _sha256(path):
        raise CheckpointError(f"{path} is not the file {_meta_path(path)} describes (its SHA-256 differs): the "
                              "pair comes from two different saves; save the checkpoint again")
    return state, meta["spec"]


def load_checkpoint(path, model: M.Module | None = None) -> tuple[M.Module, dict]:
    """``(model, spec)``: the checkpoint loaded (strictly) into ``model``, or,
    without one, into the zoo model its spec names (``kiln train --save``).
    The model is returned in eval mode.

    Raises
    ------
    CheckpointError
        As ``read_checkpoint``; or no model was given and the spec names no
        zoo model; or the arrays do not fit the model (the message lists the
        missing, unexpected and mis-shaped names).
    """
    from .zoo import MODELS, TEXT_MODELS, build_model

    path = Path(path)
    state, spec = read_checkpoint(path)
    given = model is not None
    if model is None:
        if spec.get("model") not in MODELS + TEXT_MODELS:
            raise CheckpointError(
                f"{path} holds a model kiln cannot rebuild (its spec names model {spec.get('model')!r}; kiln "
                f"rebuilds {', '.join(MODELS + TEXT_MODELS)}). Build it in Python, then load and export it: "
                "model.load_state_dict(kiln.nn.checkpoint.read_checkpoint(path)[0]); "
                "kiln.export(model, example, 'model.so')")
        in_shape, classes = spec.get("in_shape"), spec.get("classes")
        if not (isinstance(in_shape, list) and in_shape and all(_positive_int(d) for d in in_shape)):
            raise CheckpointError(f"{_meta_path(path)}: spec 'in_shape' is {in_shape!r}, expected a list of "
                                  "positive integers")
        if not _positive_int(classes):
            raise CheckpointError(f"{_meta_path(path)}: spec 'classes' is {classes!r}, expected a positive integer")
        model = build_model(spec["model"], tuple(in_shape), classes)
    if all(_POSITIONAL.fullmatch(k) for k in state) and "p0" in state:
        state = _named_from_positions(model, state)
    try:
        model.load_state_dict(state)
    except KilnError as exc:
        raise CheckpointError(f"{_misfit(path, spec, model, given)}: {exc}") from None
    model.eval()
    return model, spec


def example_input(spec: dict, batch: int):
    """Zero inputs of ``batch`` samples for a checkpoint's model: float
    images or rows, or int32 tokens for a language model (``dataset: text``)."""
    return np.zeros((batch, *spec["in_shape"]), "int32" if spec.get("dataset") == "text" else "float32")


def sequence_dynamic(spec: dict) -> bool:
    """Whether a checkpoint's model exports with a dynamic sequence length
    (``kiln.export``'s ``dynamic_seq``): a transformer language model, up
    to its ``max_len``; an LSTM unrolls over its training length."""
    return spec.get("dataset") == "text" and spec.get("model") == "transformer"


def _misfit(path: Path, spec: dict, model: M.Module, given: bool) -> str:
    """What does not fit what, where a checkpoint cannot be loaded into
    ``model``: the spec names the model the weights were saved from, which
    need not be the model given (``given``), so the two are named apart."""
    target = f"the model given, a {_kind(model)}" if given else \
        f"model {spec['model']!r} as kiln builds it, a {_kind(model)}"
    if "model" not in spec:
        return f"{path} holds weights that do not fit {target}"
    return f"{path} holds weights saved from model {spec['model']!r}; they do not fit {target}"


def _kind(model: M.Module) -> str:
    """A model's class, with its layers' for a ``Sequential``: ``Sequential(Flatten, Linear, ReLU, Linear)``."""
    if isinstance(model, M.Sequential):
        return f"{type(model).__name__}({', '.join(type(m).__name__ for m in model.modules)})"
    return type(model).__name__


def _named_from_positions(model, state: dict) -> dict:
    """First-format arrays (``p<i>``, ``b<i>`` in walk order) under the model's names."""
    named = {}
    for prefix, pairs in (("p", model.named_parameters()), ("b", model.named_buffers())):
        for i, (name, _) in enumerate(pairs):
            if f"{prefix}{i}" in state:
                named[name] = state[f"{prefix}{i}"]
        extra = [k for k in state if k[0] == prefix and int(k[1:]) >= len(pairs)]
        if extra:
            raise CheckpointError(f"the checkpoint has {', '.join(sorted(extra))}, more arrays than the model's "
                                  f"{len(pairs)} {'parameters' if prefix == 'p' else 'buffers'}")
    return named


def _meta_path(path: Path) -> Path:
    return Path(str(path) + ".json")


def _read_meta(path: Path) -> dict:
    meta_path = _meta_path(path)
    try:
        text = meta_path.read_text()
    except FileNotFoundError:
        raise CheckpointError(f"{meta_path} is missing: a checkpoint is the .npz and the .npz.json beside it, "
                              "both written by save_checkpoint (kiln train --save)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"cannot read {meta_path}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        meta = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{meta_path} is not valid JSON ({exc.msg} at line {exc.lineno}, column "
                              f"{exc.colno})") from None
    if not isinstance(meta, dict):
        raise CheckpointError(f"{meta_path} holds a JSON {type(meta).__name__}, expected an object")
    return meta


def _read_arrays(path: Path) -> dict[str, np.ndarray]:
    if not path.exists():
        raise CheckpointError(f"{path}: no such file")
    if path.is_dir():
        raise CheckpointError(f"{path} is a directory, expected the checkpoint's .npz file")
    try:
        data = np.load(path, allow_pickle=False)
        if not isinstance(data, np.lib.npyio.NpzFile):
            raise CheckpointError(f"{path} is a single .npy array, expected an .npz archive of named arrays")
        with data:  # reading every member checks every CRC now, not at first use
            return {name: data[name] for name in data.files}
    except (OSError, EOFError, ValueError, zipfile.BadZipFile, zlib.error, NotImplementedError) as exc:
        raise CheckpointError(f"{path} is not a readable .npz checkpoint (truncated, corrupt or another format): "
                              f"{exc}") from None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _positive_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0

