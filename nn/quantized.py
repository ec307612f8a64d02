"""Post-training quantization: ``kiln.quantize(model, calibration)`` returns a
copy of the model whose products with a weight run in int8 — every ``dense``
(``Linear``, an imported ``MatMul``/``Gemm``), 2-D ``matmul`` whose weight is
a ``Parameter`` (``MultiheadAttention``'s ``in_proj_weight``) and NCHW
``conv2d`` of one group (``Conv``, an imported ``Conv``), in a hand-written
or an imported model alike. Activations are uint8 per tensor (asymmetric,
the range from an observer over the calibration batches:
``nn/observers.py``), weights int8 symmetric per output channel
(``per_channel``) or per tensor. What each product becomes is in
``nn/quantized_ops.py``.

The rewrite is made where ops are applied (``te.registry.intercept``): while
calibrating, each product's input is observed, keyed by its weight; while
the quantized model runs (eagerly or traced by ``kiln.export``), each
product whose weight was quantized runs as its int8 kernels.
``QuantizedModel.report`` says, per product, what was quantized, its scales,
and the error it adds on the first calibration example(s).
"""
from __future__ import annotations

import copy
import warnings
from dataclasses import dataclass

import numpy as np

from ..errors import AttrError, DataError, DTypeError, FrontendError, ShapeError
from ..runtime.device import as_target
from ..te.registry import intercept
from .module import Module
from .observers import Observer, uint8_params
from .quantized_ops import Found, Weights, find, float_output, quantized, unsupported
from .tensor import Tensor, no_grad

class _Site:
    """A product met while calibrating: its weight, its name, what it reads."""

    def __init__(self, weight, name: str, found: Found, transposed: bool, observer: str):
        self.weight, self.name, self.transposed, self.window = weight, name, transposed, found.window
        bias = found.bias
        self.bias = None if bias is None else np.asarray(bias.numpy() if hasattr(bias, "numpy") else bias)
        self.observer, self.first = Observer(observer, name), None

    def matrix(self) -> np.ndarray:
        """The weight as the product reads it: (K, N) for a dense product, OIHW for a conv."""
        w = self.weight.numpy()
        return w.T if self.transposed else w


@dataclass
class LayerReport:
    """One product (a dense layer, a convolution): ``int8`` or left in
    ``float`` (``why``), its input scale and zero point, its weight scales'
    range, and ``error``: the relative L2 difference its int8 output makes on
    its first calibration input (``ERROR_ROWS`` rows of a dense layer's, one
    example of a convolution's; ``None`` for a float layer)."""

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
        # the copy's mode, eval: what restores a mode after a run (kiln.export) then restores that
        self.training = module.training
        self._products = products  # [(weight Parameter, read transposed, QuantizedProduct)]: a copy keeps all

    def forward(self, *args, **kwargs):
        by_weight, weights = {(id(w), t): q for w, t, q in self._products}, Weights()

        def rewrite(op, inputs, attrs):
            out = weights.transpose(op, inputs, attrs)
            if out is not None:
                return out
            found = find(op, inputs, attrs)
            param = None if found is None else weights.resolve(found)
            product = None if param is None else by_weight.get((id(param[0]), param[1]))
            return None if product is None else product(found.x, relu=bool(attrs.get("relu")))
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
                         f"{r.weight_scales[0]:>10.3g}-{r.weight_scales[1]:<10.3g} {r.error:>9.2e}"
                         + (f" ({r.why})" if r.why else ""))
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


#: the rows of a dense layer's first calibration input its reported error is measured on (a conv: one example)
ERROR_ROWS = 256
#: why a layer stays float on a CPU without an 8-bit dot product (neither AVX-512 VNNI nor AVX2; int8 in
#: int32 arithmetic measured on znver3 code: 64 x 512 -> 256 0.62 ms against 0.11 float)
NO_DOT = ("the target has no 8-bit dot-product instruction (AVX-512 VNNI, or AVX2's vpmaddubsw): int8 would "
          "run about 5x slower than float there")


#: what an int8 layer's report says on AVX2
SEVEN_BITS = "7-bit weights (-63..63), for AVX2's vpmaddubsw"


def weight_bits(target) -> int | None:
    """The bits ``kiln.quantize`` gives weights on ``target``: 8 with AVX-512
    VNNI (``vpdpbusd``), 7 with AVX2 alone (``vpmaddubsw`` sums pairs of
    products in int16: 7-bit weights keep them from saturating), None
    without either (every layer stays float)."""
    isa = as_target(target).isa
    return 8 if "avx512vnni" in isa else 7 if "avx2" in isa else None
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
    target : the CPU the model will run on (default this one): with AVX-512 VNNI weights take 8 bits,
        with AVX2 alone 7 (``weight_bits``); without either every layer stays float, each reported so
        (``NO_DOT``), with a ``RuntimeWarning``

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
    sites, floats = _calibrate(work, batches, observer, where)
    if not sites:
        raise AttrError(f"{type(model).__name__} has no dense layer or product with a weight parameter to "
                        "quantize", where=where, arg="model")
    names = [site.name for site in sites]
    skipped = {names[0] if s == "first" else names[-1] if s == "last" else s for s in skip}
    unknown = sorted(skipped - set(names))
    if unknown:
        raise AttrError(f"got {', '.join(unknown)}, expected layer names among {', '.join(names)} (or 'first', "
                        "'last')", where=where, arg="skip")
    bits = weight_bits(target)
    dot = bits is not None
    if not dot:
        warnings.warn(f"kiln.quantize: {NO_DOT}; every layer stays float", RuntimeWarning, stacklevel=2)
    report, products = [], []
    for site in sites:
        if site.name in skipped or not dot:
            report.append(LayerReport(site.name, "float", "skipped" if site.name in skipped else NO_DOT))
            continue
        qscale, zero = uint8_params(*site.observer.range())
        w = site.matrix()
        product = quantized(w, site.bias, site.window, qscale, zero, per_channel, bits)
        x = site.first[:ERROR_ROWS] if site.window is None else site.first[:1]
        want, got = float_output(w, site.bias, site.window, x), product.reference(x)
        error = float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))
        scales = product.weight_scale
        report.append(LayerReport(site.name, "int8", SEVEN_BITS if product.weight_bits == 7 else "", qscale, zero,
                                  (float(scales.min()), float(scales.max())), error))
        products.append((site.weight, site.transposed, product))
    report += [LayerReport(name, "float", why) for name, why in floats]
    return QuantizedModel(work, products, report)


def _calibrate(model, batches, observer: str, where: str) -> tuple[list, list]:
    """Run the batches through ``model``, observing the input of each product
    with a weight parameter: ``([_Site] in the order first met, [(name, why)
    of the products that stay float: a weight computed in the graph, a
    product no int8 kernel maps])``."""
    names, sites, computed, unmapped = _layer_names(model), {}, [], {}

    def observe(op, inputs, attrs):
        out = weights.transpose(op, inputs, attrs)
        if out is not None:
            return out
        found = find(op, inputs, attrs)
        if found is None:
            why = unsupported(op, inputs, attrs)
            if why is not None and id(inputs[1]) in names:
                unmapped.setdefault(id(inputs[1]), (names[id(inputs[1])], why))
            return None
        param = weights.resolve(found)
        if param is None or id(param[0]) not in names:
            if first_batch:
                computed.append((f"{op.name} #{len(computed) + 1} (weight {tuple(found.weight.shape)})", COMPUTED))
            return None
        key = (id(param[0]), param[1])
        site = sites.get(key)
        if site is None:
            site = sites[key] = _Site(param[0], names[key[0]], found, param[1], observer)
        values = found.x.numpy()
        site.observer.add(values)
        if site.first is None:
            site.first = values
        return None
    with no_grad(), intercept(observe):
        for k, batch in enumerate(batches):
            first_batch, weights = k == 0, Weights()
            try:
                model(*(Tensor(a) for a in batch))
            except (ShapeError, DTypeError, FrontendError, TypeError) as exc:
                shapes = ", ".join(str(a.shape) for a in batch)
                raise DataError(f"the model does not take a calibration batch of shape {shapes}: {exc}",
                                where=where, arg="calibration") from exc
    return list(sites.values()), computed + list(unmapped.values())
