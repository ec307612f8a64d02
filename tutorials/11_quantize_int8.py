"""
Quantize a trained model to int8
================================

You will learn how to:

* quantize a trained CNN after training (``kiln.quantize``): its
  convolutions and dense layers run int8 x int8 products summed in int32,
  calibrated on a few batches of training images;
* read the per-layer report: which layers run in int8, their scales, and
  the error each adds;
* compare the observers that choose a layer's input range (``minmax``,
  ``percentile``, ``entropy``) by test error;
* export the int8 model and time it against the float one — on the tiny
  digits CNN, where it does not pay, and on layers of a real width, where it
  does — and see the trade-off as a plot.

The int8 kernels use ``vpdpbusd`` on CPUs with AVX-512 VNNI, and
``vpmaddubsw`` on AVX2 CPUs without it (there weights get 7 bits, so that
its int16 pair sums never saturate). On a CPU with neither int8 runs exact
but slower than float, so ``kiln.quantize`` keeps every layer in float there
(and says so); the accuracy study below names a VNNI CPU as the target so
that it runs the same 8-bit weights on any machine (the kernels are exact on
every CPU, only their speed differs).

Run: ``python tutorials/11_quantize_int8.py`` (``KILN_TUTORIAL_SMALL=1`` for a
quick run).
"""
# %%
# Train a CNN on the digits
# -------------------------
#
# The zoo's CNN (two 3x3 convolutions with BatchNorm and ReLU, global
# average pooling, a linear classifier) on scikit-learn's 8x8 digits.
import os
import tempfile
import time
import warnings

import numpy as np

import kiln
from kiln.nn import data
from kiln.nn.train import fit
from kiln.nn.zoo import build_model
from kiln.runtime import Predictor

SMALL = os.environ.get("KILN_TUTORIAL_SMALL") == "1"
EPOCHS = 4 if SMALL else 15

train_set, test_set = data.digits("train", flatten=False), data.digits("test", flatten=False)
kiln.nn.init.manual_seed(0)
model = build_model("cnn", (1, 8, 8), 10)
history = fit(model, data.DataLoader(train_set, batch_size=64, shuffle=True, seed=0),
              data.DataLoader(test_set, batch_size=256), kiln.optim.Adam(model.parameters(), lr=0.01), EPOCHS)
print(history.table())

# %%
# Quantize
# --------
#
# Calibration: 256 training images in batches of 64. Each convolution and
# dense layer's input range is observed on them; weights get one int8 scale
# per output channel. ``kiln.quantize`` works on a copy: ``model`` stays
# float.
train_x, _ = train_set.arrays
test_x, test_y = test_set.arrays
calibration = [train_x[i:i + 64] for i in range(0, 256, 64)]
VNNI = kiln.cpu("znver4")  # a CPU with AVX-512 VNNI: int8 on any host, for the accuracy study
quantized = kiln.quantize(model, calibration, target=VNNI)
print(quantized.summary())

# %%
# Accuracy per observer
# ---------------------
#
# Each variant is exported (one compiled module each) and run on the 359
# test images.
workdir = tempfile.mkdtemp(prefix="kiln-int8-")
example = test_x[:1]


def test_error(module) -> float:
    return float(np.mean(module(test_x).argmax(axis=1) != test_y))


modules = {"float": Predictor(kiln.export(model, example, os.path.join(workdir, "float.so")))}
for observer in ("minmax", "percentile", "entropy"):
    variant = quantized if observer == "minmax" else kiln.quantize(model, calibration, observer=observer,
                                                                   target=VNNI)
    modules[observer] = Predictor(kiln.export(variant, example, os.path.join(workdir, f"{observer}.so")))
errors = {name: test_error(module) for name, module in modules.items()}
for name, error in errors.items():
    print(f"{name:>10}: test error {100 * error:.2f}%")

# %%
# Speed on this CPU
# -----------------
#
# Now for this machine: ``kiln.quantize`` without a target decides for this
# CPU (7-bit weights on an AVX2 CPU without VNNI; on one with neither every
# layer stays float, a warning says why, and the modules time alike). Two models: the digits CNN, and layers at a real
# width — a 1024 -> 4096 -> 1024 feed-forward block (random weights, 64 rows).
# On 8x8 images the float CNN is a single fused kernel whose second
# convolution runs as Winograd F(2x2), fewer multiplications than any direct
# product, int8 or not: int8 does not pay there. At a real width the
# products dominate, and each ``vpdpbusd`` does 64 multiply-adds.


def quiet_quantize(net, batches):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = kiln.quantize(net, batches)
    for w in caught:
        print(f"warning: {w.message}")
    return result


def median_ms(module, x, rounds: int) -> float:
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(10):
            module(x)
        samples.append((time.perf_counter() - start) / 10 * 1e3)
    return float(np.median(samples))


kiln.nn.init.manual_seed(1)
block = kiln.nn.Sequential(kiln.nn.Linear(1024, 4096), kiln.nn.ReLU(), kiln.nn.Linear(4096, 1024)).eval()
rows = np.random.default_rng(0).standard_normal((64, 1024)).astype("float32")
pairs = {"digits CNN, batch 256": (modules["float"], quiet_quantize(model, calibration), test_x[:256]),
         "1024-4096-1024, 64 rows": (Predictor(kiln.export(block, rows[:1], os.path.join(workdir, "ffn.so"))),
                                     quiet_quantize(block, [rows]), rows)}
latency = {}
for label, (float_module, int8_model, x) in pairs.items():
    int8_module = Predictor(kiln.export(int8_model, x[:1], os.path.join(workdir, f"{len(latency)}_q.so")))
    f, q = (median_ms(m, x, 5 if SMALL else 15) for m in (float_module, int8_module))
    latency[label] = (f, q)
    print(f"{label}: float {f:.3f} ms, int8 {q:.3f} ms, float / int8 {f / q:.2f}x on {kiln.cpu().mcpu}")

# %%
# The trade-off
# -------------
#
# Test error per variant, and latency per call of the float and int8
# modules (needs matplotlib, the ``plot`` extra).
try:
    import matplotlib.pyplot as plt
except ImportError:
    print("no plot: matplotlib is not installed")
else:
    fig, (left, right) = plt.subplots(1, 2, figsize=(8, 3.2))
    names = list(errors)
    left.bar(names, [100 * errors[n] for n in names], color=["gray"] + ["tab:blue"] * 3)
    left.set_ylabel("test error (%)")
    left.set_title("accuracy (int8: three observers)")
    labels = list(latency)
    ticks = np.arange(len(labels))
    right.bar(ticks - 0.2, [1.0] * len(labels), 0.4, color="gray", label="float")
    right.bar(ticks + 0.2, [latency[k][1] / latency[k][0] for k in labels], 0.4, color="tab:blue", label="int8")
    right.set_xticks(ticks, [k.split(",")[0] for k in labels])
    right.set_ylabel("time per call / float's")
    right.set_title(f"speed on {kiln.cpu().mcpu}")
    right.legend()
    fig.tight_layout()
