"""
Tuning a whole model
====================

You will learn how to:

* list the kernels a model runs, with how often each runs per inference
  (``kiln.autotune.extract``), after the export's graph passes;
* tune all of them under one budget with the task scheduler
  (``kiln.autotune.tune_model``; on the command line
  ``kiln tune --model cnn --budget 10m``), which gives each round to the
  kernel whose tuning shortens the model most;
* export the model tuned — ``kiln.export`` reads the records and compiles
  kernels for the tuned batch size — and measure it against the untuned
  export, PyTorch and ONNX Runtime (each when installed).

Run: ``python tutorials/08_tune_a_model.py`` (``KILN_TUTORIAL_SMALL=1`` for a quick run).
"""
# %%
# Setup
# -----
import os
import time
from pathlib import Path

import numpy as np

import kiln
from kiln import nn
from kiln.autotune import apply_records, extract, tune_model
from kiln.nn.train import build_model
from kiln.runtime import Predictor
from kiln.runtime.build import untuned

SMALL = os.environ.get("KILN_TUTORIAL_SMALL") == "1"
BATCH = 16
BUDGET_S = 10 if SMALL else 600  # the whole model's tuning, in seconds
RECORDS = Path("tutorial08_records.jsonl")
RECORDS.unlink(missing_ok=True)

# %%
# The model
# ---------
#
# The zoo's CNN for 8x8 digits: conv-BN-relu twice, global pooling, a
# linear layer. Latency does not depend on the weights, so it is not trained
# here (``kiln train --model cnn --save cnn.npz`` makes a trained one, and
# ``kiln tune --model cnn.npz`` tunes that).
nn.init.manual_seed(0)
model = build_model("cnn", (1, 8, 8), 10)
model.eval()
x = np.random.default_rng(0).random((BATCH, 1, 8, 8), dtype=np.float32)

# %%
# Its kernels
# -----------
#
# What the exported model runs at this batch size: eval BatchNorm folded into
# the convolutions, bias and relu fused into them, weights pre-packed, the
# channel-blocked layout kept from one convolution to the next, the first
# convolution and the pooling computed inside the second. Each distinct
# workload is one tuning task.
tasks = extract(model, x)
for t in tasks:
    print(f"{t.calls} x {t.name:<48} as {', '.join(sorted(set(t.kernels)))}")

# %%
# Tune them
# ---------
#
# Every task gets a first round (its default config first), then
# rounds go where the expected gain — calls times the recent and the
# optimistic improvement per trial — is largest. Records are appended after
# every round: a run killed at any point continues with ``resume=True``.
start = time.monotonic()


def progress(plan):
    s = plan.current
    print(f"  {plan.elapsed:5.0f} s  {s.model_task.name:<48} best {s.best_s * 1e3:.4f} ms  "
          f"model est. {plan.estimate_s() * 1e3:.4f} ms")


plan = tune_model(model, x, budget_s=BUDGET_S, records=RECORDS, round_trials=4 if SMALL else 8,
                  callback=progress)
print(f"{plan.trials} trials in {time.monotonic() - start:.0f} s; kernels (calls x best): "
      f"{plan.estimate_s(default=True) * 1e3:.4f} -> {plan.estimate_s() * 1e3:.4f} ms")
for s in plan.states:
    print(f"  {s.model_task.name:<48} {s.trials:4d} trials  {s.default_s * 1e3:.4f} -> {s.best_s * 1e3:.4f} ms"
          f"  {s.stopped}")

# %%
# Export it twice
# ---------------
#
# Records in kiln's default file (what ``kiln tune`` writes
# without ``--records``) are always read; this tutorial's file is applied.
# The tuned module gets an entry of its own for batch 16, compiled with the
# tuned configs; other batch sizes run the symbolic-batch kernels.
apply_records(RECORDS)
with untuned():
    plain = Predictor(kiln.export(model, x, "cnn_untuned.so", batches=()))
tuned = Predictor(kiln.export(model, x, "cnn_tuned.so"))
print("entries:", [e["name"] for e in tuned.meta["entries"]])
print(tuned.profile(x))

# %%
# References
# ----------
#
# The same architecture in PyTorch, eager and through ONNX
# Runtime, on the same threads.
calls = {"kiln untuned": lambda: plain(x), "kiln tuned": lambda: tuned(x)}
try:
    import torch

    t = torch.nn
    torch.set_num_threads(kiln.config.num_threads())
    tm = t.Sequential(t.Conv2d(1, 16, 3, padding=1), t.BatchNorm2d(16), t.ReLU(), t.Conv2d(16, 32, 3, padding=1),
                      t.BatchNorm2d(32), t.ReLU(), t.AdaptiveAvgPool2d(1), t.Flatten(), t.Linear(32, 10)).eval()
    xt = torch.from_numpy(x)

    def torch_call():
        with torch.inference_mode():
            tm(xt)
    calls["PyTorch eager"] = torch_call
    try:
        import onnxruntime as ort

        torch.onnx.export(tm, xt, "cnn.onnx", input_names=["x"], dynamic_axes={"x": {0: "n"}}, dynamo=False)
        options = ort.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = kiln.config.num_threads(), 1
        session = ort.InferenceSession("cnn.onnx", options, providers=["CPUExecutionProvider"])
        calls["ONNX Runtime"] = lambda: session.run(None, {"x": x})
    except ImportError:
        print("onnxruntime is not installed: no ONNX Runtime row")
except ImportError:
    print("torch is not installed: no PyTorch or ONNX Runtime rows")

# %%
# Interleaved timing
# ------------------
#
# Interleaved: each round times every contender once, so a noisy machine
# slows them alike. Each block starts with warm-up calls: the threads of the
# one timed before may still be spinning, waiting for work, for a while.
times = {name: [] for name in calls}
for _ in range(5 if SMALL else 15):
    for name, call in calls.items():
        for _ in range(20):
            call()
        begin = time.perf_counter()
        for _ in range(50):
            call()
        times[name].append((time.perf_counter() - begin) / 50)
medians = {name: float(np.median(v)) for name, v in times.items()}
for name, seconds in medians.items():
    print(f"{name:<14} {seconds * 1e3:8.4f} ms  ({medians['kiln untuned'] / seconds:.2f}x untuned)")

# %%
# Check
# -----
#
# The tuned module computes the model's eval forward.
reference = model(nn.Tensor(x)).numpy()
np.testing.assert_allclose(tuned(x), reference, rtol=1e-4, atol=1e-5)
np.testing.assert_allclose(tuned(x[:5]), reference[:5], rtol=1e-4, atol=1e-5)  # another batch size: symbolic kernels
print("tuned model matches the model's forward")
