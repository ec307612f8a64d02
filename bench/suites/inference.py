"""The inference suite: exported kiln models against PyTorch eager and ONNX Runtime.

Each model is exported once with ``kiln.export`` (one module for every batch
size) and run by ``kiln.runtime.Predictor``. Its PyTorch twin carries the same
weights and runs under ``torch.inference_mode``; ONNX Runtime runs the twin
exported with ``torch.onnx.export`` (``intra_op_num_threads`` = kiln's
threads, ``inter_op_num_threads`` = 1). The three are timed interleaved; each
(model, batch) gives a row against ONNX Runtime and one against PyTorch, and
the largest difference between kiln's output and the twin's is reported.
"""
from __future__ import annotations

import os
import tempfile

import numpy as np

from ... import nn
from ...nn.train import build_model
from ...runtime import Predictor
from ...graph.export import export
from ..rows import make_row
from ..timing import calls_sampler, compare
from ..twins import ort_session, torch_twin

TARGET = 1.0  # kiln's latency at most the reference's
# name: (model factory, input shape without the batch)
MODELS = {
    "MLP 784-512-10": (lambda: nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 10)), (784,)),
    "zoo mlp 1x8x8": (lambda: build_model("mlp", (1, 8, 8), 10), (1, 8, 8)),
    "zoo cnn 1x8x8": (lambda: build_model("cnn", (1, 8, 8), 10), (1, 8, 8)),
    "zoo resnet 1x8x8": (lambda: build_model("resnet", (1, 8, 8), 10), (1, 8, 8)),
}
BATCHES = (1, 16, 64)
QUICK = {"models": ("zoo mlp 1x8x8",), "batches": (1,)}


def _rows_for(name, predictor, twin, session, reason, torch, batch, shape, repeat):
    x = np.random.default_rng(batch).random((batch,) + shape, dtype=np.float32)
    samplers = {"kiln": calls_sampler(lambda: predictor(x))}
    extra = {}
    if torch is not None:
        xt = torch.from_numpy(x)

        def torch_fn():
            with torch.inference_mode():
                return twin(xt)

        extra["max |kiln - PyTorch|"] = float(np.abs(predictor(x) - torch_fn().numpy()).max())
        samplers["torch"] = calls_sampler(torch_fn)
    if session is not None:
        samplers["ort"] = calls_sampler(lambda: session.run(None, {"x": x}))
    sides = compare(samplers, repeat)
    workload = f"{name}, batch {batch}"
    no_torch = None if torch is not None else "PyTorch is not installed: no ratio"
    return [make_row(f"exported {workload}", "ms", sides["kiln"], "ONNX Runtime", sides.get("ort"), TARGET,
                     note=reason or no_torch, extra=extra),
            make_row(f"exported {workload}", "ms", sides["kiln"], "PyTorch eager", sides.get("torch"), TARGET,
                     note=no_torch, extra=extra)]


def run(context, repeat: int, quick: bool = False) -> list[dict]:
    """The suite's rows: per model and batch, one against ONNX Runtime and one against PyTorch."""
    torch = context.torch
    names = QUICK["models"] if quick else tuple(MODELS)
    batches = QUICK["batches"] if quick else BATCHES
    rows = []
    with tempfile.TemporaryDirectory(prefix="kiln-bench-") as folder:
        for i, name in enumerate(names):
            make, shape = MODELS[name]
            nn.init.manual_seed(0)
            model = make().eval()
            predictor = Predictor(export(model, np.zeros((1,) + shape, "float32"), os.path.join(folder, f"{i}.so")))
            twin, session, reason = None, None, "PyTorch is not installed: no ONNX model to run"
            if torch is not None:
                twin = torch_twin(model).eval()
                session, reason = ort_session(twin, shape, folder, context.threads)
            for batch in batches:
                rows += _rows_for(name, predictor, twin, session, reason, torch, batch, shape, repeat)
    return rows
