"""Post-training quantization: ``kiln.quantize(model, calibration)`` returns a
copy of the model whose products with a weight run in int8 — every ``dense``
(``Linear``, an imported ``MatMul``/``Gemm``) and 2-D ``matmul`` whose weight
is a ``Parameter`` (``MultiheadAttention``'s ``in_proj_weight``), in a
hand-written or an imported model alike. Activations are uint8 per tensor
(asymmetric, the range from an observer over the calibration batches:
``nn/observers.py``), weights int8 symmetric per output column
(``per_channel``) or per tensor. Each product becomes a ``quantize`` kernel,
then ``dense_int8`` with the dequantizing epilogue (bias and ReLU folded in),
float out.

The rewrite is made where ops are applied (``te.registry.intercept``): while
calibrating, each product's input is observed, keyed by its weight; while
the quantized model runs (eagerly or traced by ``kiln.export``), each
product whose weight was quantized runs as its int8 kernels.
``QuantizedModel.report`` says, per product, what was quantized, its scales,
and the error it adds on the first calibration batch.
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
from ..te.registry import intercept
from .module import Module, Parameter
from .observers import Observer, uint8_params
from .tensor import Tensor, no_grad

#: output columns per weight panel (16 int32 lanes: one ``vpdpbusd``)
PANEL = 16


def _product(op, inputs, attrs):
    """``(weight, x, bias, transposed)`` of a product that ``kiln.quantize``
    can take — a ``dense``, or a 2-D ``matmul`` with a weight as ``b`` — else
    None (``weight`` is the value it reads, a Parameter or not)."""
    if op.name == "dense":
        x, w, b = inputs
        transposed = False
    elif op.name == "matmul" and len(inputs) == 2 and not attrs.get("transpose_a"):
        (x, w), b = inputs, None
        transposed = bool(attrs.get("transpose_b"))
    else:
        return None
    if len(x.shape) != 2 or len(w.shape) != 2 or str(x.dtype) != "float32" or str(w.dtype) != "float32":
        return None
    return w, x, b, transposed


class _Weights:
    """Which values a product reads are weight parameters: a Parameter read
    as it is, or its transpose made in the graph (an imported ``Gemm`` with
    ``transB``), kept for one run of the model."""

    def __init__(self):
        self._transposes: dict = {}  # id(transposed value) -> (the value, kept so its id stays its own; Parameter)

    def transpose(self, op, inputs, attrs):
        """A 2-D Parameter's transpose, applied here and remembered; None for any other op."""
        if op.name != "transpose" or not isinstance(inputs[0], Parameter) or len(inputs[0].shape) != 2:
            return None
        with intercept(None):
            out = call("transpose", *inputs, **attrs)
        self._transposes[id(out)] = (out, inputs[0])
        return out

    def resolve(self, w, transposed: bool):
        """``(Parameter, transposed)`` for a weight value, or None."""
        kept = self._transposes.get(id(w))
        if kept is not None:
            return kept[1], not transposed
        return (w, transposed) if isinstance(w, Parameter) else None


class QuantizedProduct:
    """One product in int8: ``x`` quantized to uint8 (``in_scale``,
    ``in_zero_point``), times the int8 weight (in ``pack_int8_weight``'s
    panels), the int32 sums times ``scale`` plus ``offset`` per output column
    (float32; the bias is in ``offset``)."""

    def __init__(self, weight: np.ndarray, bias, in_scale: float, in_zero_point: int, per_channel: bool = True):
        w = np.asarray(weight, np.float64)
        self.in_features, self.out_features = w.shape
        self.in_scale, self.in_zero_point = float(in_scale), int(in_zero_point)
        top = np.abs(w).max(axis=0) if per_channel else np.full(w.shape[1], np.abs(w).max())
        self.weight_scale = np.where(top > 0, top / 127.0, 1.0)
        wq = np.clip(np.rint(w / self.weight_scale), -127, 127).astype(np.int8)
        bias = np.zeros(w.shape[1]) if bias is None else np.asarray(bias, np.float64)
        step = self.in_scale * self.weight_scale
        self.weight = Tensor(pack_int8_weight(wq, PANEL))
        self.scale = Tensor(step.astype(np.float32))
        self.offset = Tensor((bias - step * self.in_zero_point * wq.astype(np.int64).sum(axis=0)).astype(np.float32))

    def __call__(self, x, relu: bool = False):
        if x.shape[-1] != self.in_features:
            raise ShapeError(f"got input of shape {tuple(x.shape)}, expected (rows, {self.in_features})",
                             where="kiln.quantize", arg="x")
        q = call("quantize", x, scale=self.in_scale, zero_point=self.in_zero_point, dtype="uint8")
        return call("dense_int8", q, self.weight, self.scale, self.offset, relu=relu)


class _Site:
    """A product met while calibrating: its weight, its name, what it reads."""

    def __init__(self, weight, name: str, transposed: bool, bias, observer: str):
        self.weight, self.name, self.transposed = weight, name, transposed
        self.bias = None if bias is None else np.asarray(bias.numpy() if hasattr(bias, "numpy") else bias)
        self.observer, self.first = Observer(observer, name), None

    def matrix(self) -> np.ndarray:
        """The weight as (K, N)."""
        w = self.weight.numpy()
        return w.T if self.transposed else w


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
    """The quantized copy: calls ``module`` with each quantized product's
    weight answered by its int8 kernels; ``report`` lists every product."""

    def __init__(self, module: Module, products: list, report: list):
        self.module, self.report = module, report
        self._products = products  # [(weight Parameter, read transposed, QuantizedProduct)]: a copy keeps all

    def forward(self, *args, **kwargs):
        by_weight, weights = {(id(w), t): q for w, t, q in self._products}, _Weights()

        def rewrite(op, inputs, attrs):
            out = weights.transpose(op, inputs, attrs)
            if out is not None:
                return out
            found = _product(op, inputs, attrs)
            param = None if found is None else weights.resolve(found[0], found[3])
            product = None if param is None else by_weight.get((id(param[0]), param[1]))
            return None if product is None else product(found[1], relu=bool(attrs.get("relu")))
        with intercept(rewrite):
            return self.module(*args, **kwargs)

    def summary(self) -> str:
        """The report as a table."""
        width = max([24] + [len(r.name) + 1 for r in self.report])
        lines = [f"{'layer':<{width}} {'kind':<6} {'in scale':>10} {'zp':>4} {'weight scales':>21} {'error':>9}"]
        for r in self.report:
            if r.kind == "float":
                lines.append(f"{r.name:<{width}} {'float':<6} ({r.why})")
                continue
            lines.append(f"{r.name:<{width}} {'int8':<6} {r.in_scale:>10.3g} {r.in_zero_point:>4} "
                         f"{r.weight_scales[0]:>10.3g}-{r.weight_scales[1]:<10.3g} {r.error:>9.2e}")
        return "\n".join(lines)


def _layer_names(model: Module) -> dict:
    """``{id(parameter): name}``: a layer's weight named as the layer (``0``
    for ``0.weight``), any other parameter by its own name."""
    return {id(p): name[:-len(".weight")] if name.endswith(".weight") else name
            for name, p in model.named_parameters()}


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
#: why a product whose weight is computed (a transpose of a parameter inside the graph, an activation) stays float
COMPUTED = "its weight is computed in the graph, not a parameter read as it is"


def quantize(model: Module, calibration, per_channel: bool = True, observer: str = "minmax",
             skip=(), target=None) -> QuantizedModel:
    """A copy of ``model`` (in eval mode) whose products with a weight run in int8.

    Every ``dense`` (``Linear``; an imported ``MatMul`` or ``Gemm``) and 2-D
    ``matmul`` that reads a ``Parameter`` as its weight is quantized; the
    report names it after its layer (``0`` for ``0.weight``) or its weight.

    Parameters
    ----------
    calibration : array, or a list of input batches (arrays, or tuples of the forward's arguments)
        Representative inputs: each product's input range is observed on them.
    per_channel : bool
        One weight scale per output column (else one per layer).
    observer : "minmax", "percentile" or "entropy"
        How a layer's input range is chosen (``nn/observers.py``).
    skip : names of layers to keep in float (as ``QuantizedModel.report`` names them), or "first"/"last"
    target : the CPU the model will run on (default this one): without AVX-512 VNNI every layer stays
        float, each reported so (``NO_DOT``), with a ``RuntimeWarning``

    Raises ``DataError`` for calibration data that is empty, holds NaN or
    infinity, or does not fit the model (its error named), ``AttrError`` for
    an unknown observer or layer name and for a model with no product to
    quantize.
    """
    where = "kiln.quantize"
    Observer(observer, "")  # an unknown observer is refused before any work
    batches = _batches(calibration, where)
    work = copy.deepcopy(model)
    work.eval()
    sites, computed = _calibrate(work, batches, observer, where)
    if not sites:
        raise AttrError(f"{type(model).__name__} has no dense layer or product with a weight parameter to "
                        "quantize", where=where, arg="model")
    names = [site.name for site in sites]
    skipped = {names[0] if s == "first" else names[-1] if s == "last" else s for s in skip}
    unknown = sorted(skipped - set(names))
    if unknown:
        raise AttrError(f"got {', '.join(unknown)}, expected layer names among {', '.join(names)} (or 'first', "
                        "'last')", where=where, arg="skip")
    dot = "avx512vnni" in as_target(target).isa
    if not dot:
        warnings.warn(f"kiln.quantize: {NO_DOT}; every layer stays float", RuntimeWarning, stacklevel=2)
    report, products = [], []
    for site in sites:
        if site.name in skipped or not dot:
            report.append(LayerReport(site.name, "float", "skipped" if site.name in skipped else NO_DOT))
            continue
        qscale, zero = uint8_params(*site.observer.range())
        w = site.matrix()
        product = QuantizedProduct(w, site.bias, qscale, zero, per_channel)
        x = site.first
        want = x.astype(np.float64) @ w + (0.0 if site.bias is None else site.bias)
        with no_grad():
            got = product(Tensor(x)).numpy()
        error = float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))
        scales = product.weight_scale
        report.append(LayerReport(site.name, "int8", "", qscale, zero, (float(scales.min()), float(scales.max())),
                                  error))
        products.append((site.weight, site.transposed, product))
    report += [LayerReport(name, "float", COMPUTED) for name in computed]
    return QuantizedModel(work, products, report)


def _calibrate(model, batches, observer: str, where: str) -> tuple[list, list]:
    """Run the batches through ``model``, observing the input of each product
    with a weight parameter: ``([_Site] in the order first met, [names of the
    products whose weight is computed])``."""
    names, sites, computed = _layer_names(model), {}, []

    def observe(op, inputs, attrs):
        out = weights.transpose(op, inputs, attrs)
        if out is not None:
            return out
        found = _product(op, inputs, attrs)
        if found is None:
            return None
        w, x, bias, transposed = found
        param = weights.resolve(w, transposed)
        if param is None or id(param[0]) not in names:
            if first_batch:
                computed.append(f"{op.name} #{len(computed) + 1} ({x.shape[-1]} -> {w.shape[0 if transposed else 1]})")
            return None
        key = (id(param[0]), param[1])
        site = sites.get(key)
        if site is None:
            site = sites[key] = _Site(param[0], names[key[0]], param[1], bias, observer)
        values = x.numpy()
        site.observer.add(values)
        if site.first is None:
            site.first = values
        return None
    with no_grad(), intercept(observe):
        for k, batch in enumerate(batches):
            first_batch, weights = k == 0, _Weights()
            try:
                model(*(Tensor(a) for a in batch))
            except (ShapeError, TypeError) as exc:
                shapes = ", ".join(str(a.shape) for a in batch)
                raise DataError(f"the model does not take a calibration batch of shape {shapes}: {exc}",
                                where=where, arg="calibration") from exc
    return list(sites.values()), computed
