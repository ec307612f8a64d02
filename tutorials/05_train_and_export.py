"""
Train on compiled kernels, export, and predict in another process
==================================================================

You will learn how to:

* build a model from ``kiln.nn`` modules and train it on the digits dataset,
  where every forward and backward op is a compiled kernel;
* watch the loss per epoch (needle's training table, and a plot of it);
* write your own training loop and compile each step — forward, loss,
  backward and update — into one module call with ``kiln.compile``;
* export the trained model as one compiled module (``kiln.export``) whose
  batch dim is symbolic, so one file serves every batch size;
* load it with ``kiln.runtime.Predictor`` in a separate process that never
  imports the training code, and check its predictions.

Run: ``python tutorials/05_train_and_export.py`` (``KILN_TUTORIAL_SMALL=1`` for
a quick run).
"""
# %%
# Data
# ----
#
# Scikit-learn's 8x8 digits, split 80/20 per class with a fixed seed.
import os
import subprocess
import sys
import tempfile
import textwrap

import numpy as np

import kiln
from kiln import nn
from kiln.nn import data
from kiln.nn.train import fit

SMALL = os.environ.get("KILN_TUTORIAL_SMALL") == "1"
EPOCHS = 3 if SMALL else 20

train_set, test_set = data.digits("train"), data.digits("test")
train_loader = data.DataLoader(train_set, batch_size=64, shuffle=True, seed=0)
test_loader = data.DataLoader(test_set, batch_size=256)
print(f"{len(train_set)} training and {len(test_set)} test images of {train_set[0][0].shape} pixels")

# %%
# Model and optimizer
# -------------------
#
# ``Linear`` runs as one fused ``dense`` kernel
# (x @ W + b), the residual block adds its input back.
nn.init.manual_seed(0)
model = nn.Sequential(
    nn.Linear(64, 128), nn.ReLU(),
    nn.Residual(nn.Sequential(nn.Linear(128, 128), nn.ReLU())),
    nn.Linear(128, 10),
)
optimizer = kiln.optim.Adam(model.parameters(), lr=0.01)

# %%
# Train
# -----
#
# Each step: forward, softmax loss, backward (the ops' gradients are
# themselves registered ops), and the optimizer update, all compiled kernels.
# ``fit`` records the first step of each batch shape and compiles the whole
# step into one module call (``kiln.compile``, below); ``compiled=False``
# launches one kernel per op instead.
history = fit(model, train_loader, test_loader, optimizer, EPOCHS)
print(history.table())

# %%
# Loss curves
# -----------
#
# The same history as a figure: training and test loss per epoch (needs
# matplotlib, the ``plot`` extra).
try:
    import matplotlib.pyplot as plt
except ImportError:
    print("no plot: matplotlib is not installed")
else:
    fig, ax = plt.subplots(figsize=(6, 3.5))
    epochs = [e.epoch for e in history.epochs]
    ax.plot(epochs, [e.train_loss for e in history.epochs], marker="o", label="train")
    ax.plot(epochs, [e.test_loss for e in history.epochs], marker="o", label="test")
    ax.set_xticks(epochs)
    ax.set_xlabel("epoch")
    ax.set_ylabel("softmax loss")
    ax.legend()
    fig.tight_layout()

# %%
# Your own loop, compiled
# -----------------------
#
# Your own loop. ``kiln.compile(fn, optimizer)`` takes a function returning
# the loss: its first call runs eagerly while every op — the function, the
# backward, the optimizer's fused updates — is recorded into one graph, which
# is fused and compiled; later calls with the same shapes are one module
# call that updates the parameters in place. Python decisions (the model's
# train/eval mode, shapes) are fixed when it is traced, as with ``jax.jit``.
loss_fn = nn.SoftmaxLoss()
step = kiln.compile(lambda x, y: loss_fn(model(x), y), optimizer)
model.train()
losses = [float(step(x, y.astype("int32")).numpy()) for x, y in train_loader if len(y) == 64]
print(f"one more epoch with kiln.compile: mean loss {np.mean(losses):.4f} over {len(losses)} steps, "
      f"{step.signatures} compiled signature")
model.eval()

# %%
# Export
# ------
#
# The forward is traced through the same op declarations into a Relax
# module of kiln-scheduled kernels; weights become constants in the file.
workdir = tempfile.mkdtemp(prefix="kiln-tutorial-")
path = kiln.export(model, np.zeros((1, 64), "float32"), os.path.join(workdir, "digits.so"))
print(f"exported {path} ({os.path.getsize(path) / 1024:.0f} KiB)")

# %%
# Predict in another process
# --------------------------
#
# Predict in a fresh process that blocks ``kiln.nn``: the predictor needs only
# TVM and the file.
images = np.stack([test_set[i][0] for i in range(32)])
labels = np.array([test_set[i][1] for i in range(32)])
np.save(os.path.join(workdir, "x.npy"), images)
script = textwrap.dedent(f"""
    import sys, numpy as np
    class Block:
        def find_spec(self, name, path=None, target=None):
            if name.startswith("kiln.nn"):
                raise ImportError(name)
    sys.meta_path.insert(0, Block())
    from kiln.runtime import Predictor
    scores = Predictor({str(path)!r})(np.load({os.path.join(workdir, 'x.npy')!r}))
    np.save({os.path.join(workdir, 'scores.npy')!r}, scores)
""")
subprocess.run([sys.executable, "-c", script], check=True)
scores = np.load(os.path.join(workdir, "scores.npy"))

# %%
# Check
# -----
#
# The exported module computes what the model computes in eval mode.
model.eval()
with kiln.no_grad():
    expected = model(kiln.Tensor(images)).numpy()
np.testing.assert_allclose(scores, expected, atol=1e-5)
accuracy = float(np.mean(scores.argmax(axis=1) == labels))
print(f"exported model: {accuracy:.0%} of 32 test images right; matches the trained model")
assert accuracy > (0.6 if SMALL else 0.9)
