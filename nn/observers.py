"""How a quantized layer's input range is chosen from calibration data: the
observers ``kiln.quantize`` offers (``OBSERVERS``), each gathering the values
a layer reads and giving a ``(low, high)`` range that uint8 then spans.

- ``minmax``: the smallest and largest value seen (nothing clipped; one
  outlier widens every step).
- ``percentile``: the 0.01th and 99.99th percentiles (``PERCENTILE``) of
  the values seen: the rare outliers are clipped, the steps stay fine.
- ``entropy``: the symmetric range ``[-t, t]`` (``[0, t]`` for values that
  are never negative) whose 128-level quantization keeps the histogram of
  ``|x|`` closest in KL divergence (256 levels for ``[0, t]``; TensorRT's
  calibration, ONNX Runtime's ``CalibrationMethod.Entropy``). Exact zeros
  are left out of the histogram: zero is a level at every threshold, so they
  are never in error, and a ReLU's zeros (half its outputs or more) would
  otherwise fill the first bin and push the threshold down (on the digits
  CNN the second convolution's input was clipped at 1.56 of 4.16).
"""
from __future__ import annotations

import numpy as np

from ..errors import AttrError, DataError

OBSERVERS = ("minmax", "percentile", "entropy")
#: the percentile observer's upper percentile (the lower one is 100 minus it)
PERCENTILE = 99.99
#: values a percentile or entropy observer keeps per layer (a random sample past it)
MAX_SAMPLES = 1 << 20
#: the entropy observer's histogram bins and the levels it quantizes them to
BINS, LEVELS = 2048, 128


class Observer:
    """Gathers one layer's input values over the calibration batches."""

    def __init__(self, kind: str, name: str):
        if kind not in OBSERVERS:
            raise AttrError(f"got {kind!r}, expected one of {', '.join(OBSERVERS)}", where="kiln.quantize",
                            arg="observer")
        self.kind, self.name = kind, name
        self.low, self.high, self.samples, self.count = np.inf, -np.inf, [], 0
        self._rng = np.random.default_rng(0)

    def add(self, values: np.ndarray) -> None:
        flat = np.asarray(values, dtype=np.float64).ravel()
        if not np.isfinite(flat).all():
            raise DataError(f"layer {self.name!r} read a NaN or infinite value on the calibration data: the "
                            "calibration batches (or the model's weights) hold one", where="kiln.quantize",
                            arg="calibration")
        self.low, self.high = min(self.low, float(flat.min())), max(self.high, float(flat.max()))
        self.count += flat.size
        if self.kind != "minmax":
            keep = MAX_SAMPLES // 4
            self.samples.append(flat if flat.size <= keep else self._rng.choice(flat, keep, replace=False))

    def range(self) -> tuple[float, float]:
        """The ``(low, high)`` to quantize to, always holding 0."""
        if self.kind == "minmax":
            low, high = self.low, self.high
        else:
            values = np.concatenate(self.samples)
            if values.size > MAX_SAMPLES:
                values = self._rng.choice(values, MAX_SAMPLES, replace=False)
            if self.kind == "percentile":
                low, high = np.percentile(values, [100 - PERCENTILE, PERCENTILE])
            else:
                t = entropy_threshold(np.abs(values), LEVELS if self.low < 0 else 2 * LEVELS)
                low, high = (-t if self.low < 0 else 0.0), t
        return min(float(low), 0.0), max(float(high), 0.0)


def entropy_threshold(magnitudes: np.ndarray, levels: int = LEVELS) -> float:
    """The clipping threshold of ``|x|`` that minimizes the KL divergence
    between the histogram clipped there and its ``levels``-level
    quantization (128 for a signed range, 256 for a non-negative one).
    Exact zeros are not counted: they quantize exactly at any threshold."""
    magnitudes = magnitudes[magnitudes != 0]
    if magnitudes.size == 0:
        return 0.0
    top = float(magnitudes.max())
    hist, edges = np.histogram(magnitudes, bins=BINS, range=(0.0, top))
    hist = hist.astype(np.float64)
    best, best_kl = BINS, np.inf
    for i in range(levels, BINS + 1, 16):
        ref = hist[:i].copy()
        ref[-1] += hist[i:].sum()  # the clipped tail lands in the last bin
        chunks = np.array_split(np.arange(i), levels)
        quant = np.zeros(i)
        for idx in chunks:
            nonzero = hist[idx] != 0
            if nonzero.any():
                quant[idx[nonzero]] = hist[idx].sum() / nonzero.sum()
        p, q = ref / ref.sum(), quant / max(quant.sum(), 1e-12)
        mask = p > 0
        kl = float(np.sum(p[mask] * np.log(p[mask] / np.maximum(q[mask], 1e-12))))
        if kl < best_kl:
            best, best_kl = i, kl
    return float(edges[best])


def uint8_params(low: float, high: float) -> tuple[float, int]:
    """``(scale, zero_point)`` of uint8 spanning ``[low, high]`` (which holds 0)."""
    if high - low <= 0.0:
        return 1.0, 0
    scale = (high - low) / 255.0
    return scale, int(np.clip(round(-low / scale), 0, 255))
