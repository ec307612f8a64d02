"""Post-training quantization: ``kiln.quantize(model, calibration)`` returns a
copy of the model whose dense layers (``Linear``) run in int8 — uint8
activations per tensor (asymmetric, the range from an observer over the
calibration batches: ``nn/observers.py``), int8 weights symmetric per output
column (``per_channel``) or per tensor — as ``QuantizedLinear``: a
``quantize`` kernel, then ``dense_int8`` with the dequantizing epilogue, float
out. ``QuantizedModel.report`` says, per layer, what was quantized, its
scales, and the error it adds on the first calibration batch. The model
exports (``kiln.export``) like any other.
"""
from __future__ import annotations

import copy
import warnings
from dataclasses import dataclass

import numpy as np

from ..errors import AttrError, DataError, ShapeError
from ..runtime.device import as_target
from ..te import call
from ..te.quantize import pack_int8_weight
from .module import Module
from .modules import Linear
from .observers import Observer, uint8_params
from .tensor import Tensor, no_grad

#: output columns per weight panel (16 int32 lanes: one ``vpdpbusd``)
PANEL = 16


class QuantizedLinear(Module):
    """A ``Linear`` in int8: ``x`` quantized to uint8 (``in_scale``,
    ``in_zero_point``), times the int8 weight (``weight``, in
    ``pack_int8_weight``'s panels), the int32 sums times ``scale`` plus
    ``offset`` per output column (float32)."""

    def __init__(self, layer: Linear, in_scale: float, in_zero_point: int, per_channel: bool = True):
        w = layer.weight.numpy().astype(np.float64)
        self.in_features, self.out_features = layer.in_features, layer.out_features
        self.in_scale, self.in_zero_point = float(in_scale), int(in_zero_point)
        top = np.abs(w).max(axis=0) if per_channel else np.full(w.shape[1], np.abs(w).max())
        self.weight_scale = np.where(top > 0, top / 127.0, 1.0)
        wq = np.clip(np.rint(w / self.weight_scale), -127, 127).astype(np.int8)
        bias = layer.bias.numpy().astype(np.float64) if layer.bias is not None else np.zeros(w.shape[1])
        step = self.in_scale * self.weight_scale
        self.weight = Tensor(pack_int8_weight(wq, PANEL))
        self.scale = Tensor(step.astype(np.float32))
        self.offset = Tensor((bias - step * self.in_zero_point * wq.astype(np.int64).sum(axis=0)).astype(np.float32))

    def forward(self, x):
        if x.shape[-1] != self.in_features:
            raise ShapeError(f"got input of shape {tuple(x.shape)}, expected (..., {self.in_features})",
                             where="QuantizedLinear", arg="x")
        count = 1
        for d in x.shape[:-1]:  # the rows, symbolic in a trace with a dynamic batch
            count = count * d
        rows = x if x.ndim == 2 else x.reshape((count, self.in_features))
        q = call("quantize", rows, scale=self.in_scale, zero_point=self.in_zero_point, dtype="uint8")
        out = call("dense_int8", q, self.weight, self.scale, self.offset)
        return out if x.ndim == 2 else out.reshape((*x.shape[:-1], self.out_features))


@dataclass
class LayerReport:
    """One dense layer: ``int8`` or left in ``float`` (``why``), its input
    scale and zero point, its weight scales' range, and ``error``: the
    relative L2 difference its int8 output makes on the first calibration
    batch (``None`` for a float layer)."""

    name: str
    kind: str
    why: str = ""
    in_scale: float | None = None
    in_zero_point: int | None = None
    weight_scales: tuple | None = None
    error: float | None = None


class QuantizedModel(Module):
    """The quantized copy: calls ``module`` (its float layers kept, its dense
    layers ``QuantizedLinear``); ``report`` lists every dense layer."""

    def __init__(self, module: Module, report: list):
        self.module, self.report = module, report

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def summary(self) -> str:
        """The report as a table."""
        lines = [f"{'layer':<24} {'kind':<6} {'in scale':>10} {'zp':>4} {'weight scales':>21} {'error':>9}"]
        for r in self.report:
            if r.kind == "float":
                lines.append(f"{r.name:<24} {'float':<6} ({r.why})")
                continue
            lines.append(f"{r.name:<24} {'int8':<6} {r.in_scale:>10.3g} {r.in_zero_point:>4} "
                         f"{r.weight_scales[0]:>10.3g}-{r.weight_scales[1]:<10.3g} {r.error:>9.2e}")
        return "\n".join(lines)


def _dense_layers(model: Module) -> list[tuple[str, object, object, Linear]]:
    """``(name, container, key, layer)`` for every ``Linear`` inside ``model``."""
    found, seen = [], set()

    def walk(value, prefix: str, container, key):
        if isinstance(value, Linear):
            found.append((prefix, container, key, value))
        elif isinstance(value, Module) and id(value) not in seen:
            seen.add(id(value))
            for k, v in vars(value).items():
                name = prefix if k in value._unprefixed else f"{prefix}.{k}".lstrip(".")
                walk(v, name, value, k)
        elif isinstance(value, list):
            for i, v in enumerate(value):
                walk(v, f"{prefix}.{i}".lstrip("."), value, i)
        elif isinstance(value, dict):
            for k, v in value.items():
                walk(v, f"{prefix}.{k}".lstrip("."), value, k)

    walk(model, "", None, None)
    return found


def _put(container, key, layer) -> None:
    if isinstance(container, (list, dict)):
        container[key] = layer
    else:
        setattr(container, key, layer)


def _batches(calibration, where: str) -> list:
    batches = [calibration] if isinstance(calibration, np.ndarray) else list(calibration)
    arrays = [b if isinstance(b, tuple) else (b,) for b in batches]
    if not arrays or any(not len(b) for b in arrays):
        raise DataError("got no calibration batch, expected an array or a list of input batches", where=where,
                        arg="calibration")
    out = []
    for b in arrays:
        arrs = tuple(np.asarray(a.numpy() if hasattr(a, "numpy") else a) for a in b)
        if any(a.size == 0 for a in arrs):
            raise DataError("got an empty calibration batch", where=where, arg="calibration")
        if any(a.dtype.kind == "f" and not np.isfinite(a).all() for a in arrs):
            raise DataError("a calibration batch holds NaN or infinity", where=where, arg="calibration")
        out.append(arrs)
    return out


#: why a layer stays float on a CPU without an 8-bit dot product (measured on znver3 code: 64 x 512 -> 256
#: 0.62 ms int8 against 0.11 float; 1024 x 768 -> 768 43.7 against 8.3)
NO_DOT = ("the target has no 8-bit dot-product instruction (AVX-512 VNNI): int8 would run about 5x slower "
          "than float there")


def quantize(model: Module, calibration, per_channel: bool = True, observer: str = "minmax",
             skip=(), target=None) -> QuantizedModel:
    """A copy of ``model`` (in eval mode) whose ``Linear`` layers run in int8.

    Parameters
    ----------
    calibration : array, or a list of input batches (arrays, or tuples of the forward's arguments)
        Representative inputs: each dense layer's input range is observed on them.
    per_channel : bool
        One weight scale per output column (else one per layer).
    observer : "minmax", "percentile" or "entropy"
        How a layer's input range is chosen (``nn/observers.py``).
    skip : names of layers to keep in float (as ``QuantizedModel.report`` names them), or "first"/"last"
    target : the CPU the model will run on (default this one): without AVX-512 VNNI every layer stays
        float, each reported so (``NO_DOT``), with a ``RuntimeWarning``

    Raises ``DataError`` for calibration data that is empty, holds NaN or
    infinity, or does not fit the model (its error named), ``AttrError`` for
    an unknown observer or layer name and for a model with no dense layer.
    """
    where = "kiln.quantize"
    Observer(observer, "")  # an unknown observer is refused before any work
    batches = _batches(calibration, where)
    work = copy.deepcopy(model)
    work.eval()
    layers = _dense_layers(work)
    if not layers:
        raise AttrError(f"{type(model).__name__} has no dense layer (Linear) to quantize", where=where, arg="model")
    names = [name for name, *_ in layers]
    skipped = {names[0] if s == "first" else names[-1] if s == "last" else s for s in skip}
    unknown = sorted(skipped - set(names))
    if unknown:
        raise AttrError(f"got {', '.join(unknown)}, expected layer names among {', '.join(names)} (or 'first', "
                        "'last')", where=where, arg="skip")
    observers, firsts = _calibrate(work, layers, batches, observer, where)
    dot = "avx512vnni" in as_target(target).isa
    if not dot:
        warnings.warn(f"kiln.quantize: {NO_DOT}; every layer stays float", RuntimeWarning, stacklevel=2)
    report = []
    for name, container, key, layer in layers:
        if name in skipped or not dot:
            report.append(LayerReport(name, "float", "skipped" if name in skipped else NO_DOT))
            continue
        qscale, zero = uint8_params(*observers[name].range())
        quantized = QuantizedLinear(layer, qscale, zero, per_channel)
        with no_grad():
            x = Tensor(firsts[name])
            want, got = layer(x).numpy(), quantized(x).numpy()
        error = float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))
        scales = quantized.weight_scale
        report.append(LayerReport(name, "int8", "", qscale, zero, (float(scales.min()), float(scales.max())), error))
        _put(container, key, quantized)
    return QuantizedModel(work, report)


def _calibrate(model, layers, batches, observer: str, where: str) -> tuple[dict, dict]:
    """Run the batches through ``model``, observing each dense layer's input:
    ``({name: Observer}, {name: its input on the first batch})``."""
    observers = {name: Observer(observer, name) for name, *_ in layers}
    firsts: dict = {}
    originals = []
    for name, _, _, layer in layers:
        forward = layer.forward

        def observed(x, forward=forward, name=name):
            values = x.numpy()
            observers[name].add(values)
            firsts.setdefault(name, values)
            return forward(x)
        originals.append(layer)
        layer.forward = observed
    try:
        with no_grad():
            for batch in batches:
                try:
                    model(*(Tensor(a) for a in batch))
                except (ShapeError, TypeError) as exc:
                    shapes = ", ".join(str(a.shape) for a in batch)
                    raise DataError(f"the model does not take a calibration batch of shape {shapes}: {exc}",
                                    where=where, arg="calibration") from exc
    finally:
        for layer in originals:
            del layer.forward
    missing = [name for name in observers if not observers[name].count]
    if missing:
        raise DataError(f"layer(s) {', '.join(missing)} never ran on the calibration data", where=where,
                        arg="calibration")
    return observers, firsts
