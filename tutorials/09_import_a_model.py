"""
Import a model from PyTorch and ONNX
====================================

You will learn how to:

* import a PyTorch module with ``kiln.frontend.from_torch`` (through
  ``torch.export``) and read what it became with ``summary()``: a
  ``kiln.nn.Module`` whose weights are ``Parameter`` s under their
  ``state_dict`` names, and whose batch dim is symbolic;
* write the same model to ONNX with a dynamic batch axis and import the file
  with ``kiln.frontend.from_onnx`` (on the command line: ``kiln export
  resnet.onnx --out resnet.so``);
* export both with ``kiln.export``, run them with ``Predictor``, and check
  them against PyTorch and ONNX Runtime;
* time kiln against ONNX Runtime at batch 1;
* port a model by hand instead: ``kiln.nn`` layers with PyTorch's arguments
  and ``load_state_dict(state, layout="torch")``.

The model is a ResNet written in PyTorch (``kiln.bench.torch_models``, layer
for layer torchvision's): ResNet-18's depth at an eighth of its width on
224x224 images, so that it compiles in minutes, or one block per stage on
32x32 images with ``KILN_TUTORIAL_SMALL=1``. It needs PyTorch and the onnx package (both
in the ``test`` extra); ONNX Runtime is optional.

Run: ``python tutorials/09_import_a_model.py`` (``KILN_TUTORIAL_SMALL=1`` for a quick run).
"""
# %%
# Setup
# -----
import os
import time
import warnings

import numpy as np
import torch

import kiln
from kiln import nn
from kiln.bench.torch_models import resnet
from kiln.errors import FrontendError
from kiln.frontend import from_onnx, from_torch
from kiln.runtime import Predictor

SMALL = os.environ.get("KILN_TUTORIAL_SMALL") == "1"
SIZE = 32 if SMALL else 224
torch.manual_seed(0)
torch.set_num_threads(kiln.config.num_threads())  # every contender on the same threads
rng = np.random.default_rng(0)
images = rng.standard_normal((4, 3, SIZE, SIZE)).astype(np.float32)
x1 = images[:1]

# %%
# The PyTorch model
# -----------------
#
# ResNet-18's architecture (basic blocks, two per stage) with 8 channels
# after the stem instead of 64, or one block per stage for the quick run;
# random weights, and BatchNorm statistics away from their defaults so that
# a wrong fold would show. (``width=64, classes=1000`` is ResNet-18 itself:
# it imports the same way, and compiles for a good while longer.)
net = resnet(layers=(1, 1, 1, 1) if SMALL else (2, 2, 2, 2), width=8, classes=10, bottleneck=False)
with torch.inference_mode():
    reference = net(torch.from_numpy(images)).numpy()
print(f"ResNet: {sum(p.numel() for p in net.parameters()):,} parameters, output {reference.shape}")

# %%
# From PyTorch
# ------------
#
# ``from_torch(module, example_args)`` captures the forward with
# ``torch.export`` in eval mode, decomposed to core ATen, and converts each
# op to kiln's. Every unsupported op would be listed at once, before anything
# runs (``kiln ops --aten`` lists what converts). The first dim of every input
# is exported as a dynamic batch where ``torch.export`` accepts it (pass
# ``dynamic_shapes=`` to say otherwise), so the imported model takes any
# batch size. (An example batch of 1 would fix the batch at 1: ``torch.export``
# specializes dims of size 0 and 1.)
imported = from_torch(net, (torch.from_numpy(images[:2]),))
print(imported.summary())
names = [name for name, _ in imported.named_parameters()]
print("first parameters:", names[:4])
assert names == [name for name, _ in net.named_parameters()]  # trainable, under the state_dict's names
assert imported.inputs[0].shape[0] is None  # the batch is symbolic

# %%
# Export it and compare with PyTorch
# ----------------------------------
#
# The imported model is a ``kiln.nn.Module``: ``kiln.export`` traces it like
# any model, folds each BatchNorm into its convolution and fuses the bias,
# relu and residual adds into the convolutions' write-back. It makes the
# first dim symbolic, so one file serves every batch size (``batches=()``:
# no extra entries for the batch sizes tuning records name).
start = time.perf_counter()
if SMALL:  # the quick run exports the ONNX import only (below) and runs this one eagerly
    from_pytorch = None
    got = imported(x1).numpy()
else:
    torch_so = kiln.export(imported, x1, "resnet_torch.so", batches=())
    print(f"exported {torch_so} in {time.perf_counter() - start:.0f} s")
    from_pytorch = Predictor(torch_so)
    got = from_pytorch(x1)
err_torch = float(np.abs(got - reference[:1]).max())
print(f"batch 1: largest difference from PyTorch {err_torch:.2e}")
np.testing.assert_allclose(got, reference[:1], rtol=1e-4, atol=1e-4)

# %%
# Through an ONNX file
# --------------------
#
# The same model written to ONNX by PyTorch's TorchScript exporter, with a
# dynamic batch axis. ``do_constant_folding=False`` keeps each BatchNorm a
# node of its own, so the file's weights keep the module's names (folded,
# they would be ``onnx::Conv_...``) and kiln folds them at export as it did
# for the PyTorch import: the same kernels.
# ``from_onnx`` keeps the file's names.
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # the legacy exporter's deprecation notice
    torch.onnx.export(net, (torch.from_numpy(x1),), "resnet.onnx", dynamo=False, input_names=["image"],
                      output_names=["logits"], dynamic_axes={"image": {0: "N"}, "logits": {0: "N"}},
                      do_constant_folding=False)
from_file = from_onnx("resnet.onnx")
print(from_file.summary())
print("first parameters:", [name for name, _ in from_file.named_parameters()][:4])

# %%
# Export the ONNX import
# ----------------------
#
# The same graph as the PyTorch import's, so its kernels come from the cache
# the first export filled; this is what ``kiln export resnet.onnx --out
# resnet_onnx.so`` does. The other dims are fixed to the example's; a file
# that leaves them symbolic (a sequence length) runs eagerly at any size, and
# the command line asks for them: ``--input-shape ids=Nx128``. In Python,
# ``from_onnx(path, input_shapes={"ids": (None, 128)})`` fixes them up front,
# ``None`` keeping the batch symbolic.
start = time.perf_counter()
onnx_so = kiln.export(from_file, x1, "resnet_onnx.so", batches=())
print(f"exported {onnx_so} in {time.perf_counter() - start:.0f} s")
from_onnx_file = Predictor(onnx_so)
print("inputs:", from_onnx_file.inputs)
ours = {batch: from_onnx_file(images[:batch]) for batch in (1, len(images))}

# %%
# Compare with ONNX Runtime
# -------------------------
#
# ONNX Runtime runs the file itself, on as many threads as kiln.
try:
    import onnxruntime as ort
except ImportError:
    ort = None
    print("onnxruntime is not installed: the kiln module is compared with PyTorch instead")
if ort is not None:
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = kiln.config.num_threads(), 1
    session = ort.InferenceSession("resnet.onnx", options, providers=["CPUExecutionProvider"])
    theirs = {batch: session.run(None, {"image": images[:batch]})[0] for batch in ours}
else:
    theirs = {batch: reference[:batch] for batch in ours}
for batch in ours:
    err = float(np.abs(ours[batch] - theirs[batch]).max())
    print(f"batch {batch}: largest difference {err:.2e}")
    np.testing.assert_allclose(ours[batch], theirs[batch], rtol=1e-4, atol=1e-4)

# %%
# Timing at batch 1
# -----------------
#
# Interleaved, as in the tuning tutorial: each round times every contender
# once after a few warm-up calls, and the median round is printed. kiln's
# kernels are its templates' defaults unless kiln's records hold tuned
# configs for them (``kiln tune --model resnet.onnx`` tunes them, see the
# tuning tutorial); without ONNX Runtime, PyTorch eager is the reference.
calls = {"kiln (from ONNX)": lambda: from_onnx_file(x1)}
if from_pytorch is not None:
    calls["kiln (from PyTorch)"] = lambda: from_pytorch(x1)
if ort is not None:
    calls["ONNX Runtime"] = lambda: session.run(None, {"image": x1})
    baseline = "ONNX Runtime"
else:
    xt = torch.from_numpy(x1)

    def torch_call():
        with torch.inference_mode():
            net(xt)
    calls["PyTorch eager"] = torch_call
    baseline = "PyTorch eager"
rounds, per_round = (5, 10) if SMALL else (7, 20)
times = {name: [] for name in calls}
for _ in range(rounds):
    for name, call in calls.items():
        for _ in range(3):
            call()
        begin = time.perf_counter()
        for _ in range(per_round):
            call()
        times[name].append((time.perf_counter() - begin) / per_round)
medians = {name: float(np.median(v)) for name, v in times.items()}
for name, seconds in medians.items():
    print(f"{name:<20} {seconds * 1e3:8.3f} ms  ({medians[baseline] / seconds:.2f}x {baseline})")

# %%
# Porting by hand
# ---------------
#
# Where a frontend does not fit (an op it lacks, or a model you want to
# change), write the model with ``kiln.nn`` layers, which take PyTorch's
# arguments, and load PyTorch's weights with ``layout="torch"``: ``Linear``
# weights are transposed on the way in, BatchNorm's ``num_batches_tracked``
# is kept. Here, the ResNet's stem; its names in the PyTorch model
# (``conv1``, ``bn1``) become the positions of an ``nn.Sequential``.
stem = nn.Sequential(nn.Conv(3, net.conv1.out_channels, 7, stride=2, padding=3, bias=False),
                     nn.BatchNorm2d(net.conv1.out_channels), nn.ReLU(), nn.MaxPool2d(3, stride=2, padding=1))
renamed = {"conv1": "0", "bn1": "1"}
state = {f"{renamed[key.split('.')[0]]}.{key.split('.', 1)[1]}": value
         for key, value in net.state_dict().items() if key.split(".")[0] in renamed}
print("loading", ", ".join(state))
stem.load_state_dict(state, layout="torch")
stem.eval()
with torch.inference_mode():
    want = net.maxpool(net.relu(net.bn1(net.conv1(torch.from_numpy(x1))))).numpy()
with kiln.no_grad():
    stem_out = stem(kiln.Tensor(x1)).numpy()
err_stem = float(np.abs(stem_out - want).max())
print(f"hand-ported stem: output {stem_out.shape}, largest difference from PyTorch {err_stem:.2e}")

# %%
# What does not import
# --------------------
#
# Unsupported ops are refused before anything runs, all of them at once, as a
# ``FrontendError`` that says where to look.


class Spectrum(torch.nn.Module):
    def forward(self, x):
        return torch.fft.rfft(x).abs()


try:
    from_torch(Spectrum(), (torch.randn(2, 8),))
except FrontendError as e:
    print("refused:", e)

# %%
# Check
# -----
#
# Both imports, exported, compute what PyTorch computes, at batch 1 and at
# another batch size; the hand-ported stem too.
np.testing.assert_allclose(ours[len(images)], reference, rtol=1e-4, atol=1e-4)
np.testing.assert_allclose(stem_out, want, rtol=1e-4, atol=1e-4)
print(f"from_torch and from_onnx both match PyTorch (largest differences {err_torch:.1e}, "
      f"{float(np.abs(ours[len(images)] - reference).max()):.1e}); at batch 1 kiln (from ONNX) ran "
      f"{medians['kiln (from ONNX)'] * 1e3:.3f} ms, {baseline} {medians[baseline] * 1e3:.3f} ms")
