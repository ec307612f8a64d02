"""The models suite: the models users bring, at their real sizes.

ResNet-50, ResNet-18 and MobileNetV2 on 3x224x224 images, BERT-base and
GPT-2 small on 128 tokens (``kiln.bench.torch_models``: PyTorch definitions,
random weights, BatchNorm statistics randomized). Each is exported to ONNX
by ``torch.onnx.export`` with a dynamic batch, imported by
``kiln.frontend.from_onnx`` and compiled by ``kiln.export`` once (one module
for every batch); the export's seconds are reported as they were, with the
kernel cache as it was (cold on a fresh machine). Then, per batch, kiln's
``Predictor``, ONNX Runtime on the same ONNX file, PyTorch eager
(``torch.inference_mode``) and ``torch.compile`` (inductor) are timed
interleaved at kiln's thread count; each (model, batch) gives a row against
each reference, with kiln's output's difference from PyTorch's (relative to
the output's largest magnitude), the model's GFLOPS (its ops' ``flops``
over kiln's median) and their share of the machine's FMA peak.

``--quick`` runs a ResNet-18 of width 16 on 32x32 images and a 2-layer
BERT of width 64 on 16 tokens at batch 1, without ``torch.compile`` (inductor's compile
takes longer than the rest): the suite's path, not its figures.
"""
from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
import time

import numpy as np

from ..rows import make_row
from ..timing import calls_sampler, compare

TARGET = 1.0  # kiln's latency at most the reference's
BATCHES = (1, 8)
REFERENCES = (("ort", "ONNX Runtime"), ("torch", "PyTorch eager"), ("compiled", "torch.compile"))
NEEDS = ("torch", "onnx", "onnxruntime", "transformers")


def _resnet(quick, **kw):
    from .. import torch_models
    return torch_models.resnet(**kw, **({"width": 16} if quick else {})), \
        ("image", (3, 32, 32) if quick else (3, 224, 224))


def _mobilenet(quick):
    from .. import torch_models
    return torch_models.mobilenet_v2(), ("image", (3, 64, 64) if quick else (3, 224, 224))


def _transformer(quick, which):
    from .. import torch_models
    make = torch_models.bert if which == "bert" else torch_models.gpt2
    model = make(hidden=64, layers=2, heads=2, **({"intermediate": 256} if which == "bert" else {}), vocab=1000) \
        if quick else make()
    return torch_models.HiddenStates(model), ("tokens", 16 if quick else 128)


#: name: (factory taking ``quick``, in the order the suite runs them)
MODELS = {
    "ResNet-50": lambda quick: _resnet(quick),
    "ResNet-18": lambda quick: _resnet(quick, layers=(2, 2, 2, 2), bottleneck=False),
    "MobileNetV2": _mobilenet,
    "BERT-base": lambda quick: _transformer(quick, "bert"),
    "GPT-2 small": lambda quick: _transformer(quick, "gpt2"),
}
QUICK = {"models": ("ResNet-18", "BERT-base"), "batches": (1,)}


def inputs(kind, size, batch: int, vocab: int, seed: int | None = None) -> dict[str, np.ndarray]:
    """A batch of random images or token ids (seeded by the batch size unless ``seed`` is given)."""
    rng = np.random.default_rng(batch if seed is None else seed)
    if kind == "image":
        return {"image": rng.standard_normal((batch,) + size, dtype=np.float32)}
    return {"input_ids": rng.integers(0, vocab, (batch, size), dtype=np.int64),
            "attention_mask": np.ones((batch, size), np.int64)}


def gflop(imported, arrays: dict) -> float:
    """The model's floating-point work at these inputs, from kiln's own graph."""
    from ...graph.trace import trace
    graph = trace(imported, arrays, dynamic_batch=False)
    return sum(n.op.flops([v.shape for v in n.inputs], **n.attrs) for n in graph.nodes) / 1e9


def write_onnx(name: str, quick: bool, folder: str):
    """``(torch model, kind, size, vocab, ONNX path, example inputs)``: the
    model written by ``torch.onnx.export`` with a dynamic batch."""
    import torch

    model, (kind, size) = MODELS[name](quick)
    vocab = getattr(getattr(model, "model", model), "config", None)
    vocab = vocab.vocab_size if vocab is not None else 0
    example = inputs(kind, size, 1, vocab)
    path = os.path.join(folder, f"{len(os.listdir(folder))}.onnx")
    axes = {n: {0: "batch"} for n in example}
    with torch.no_grad():
        torch.onnx.export(model, tuple(torch.from_numpy(a) for a in example.values()), path, dynamo=False,
                          input_names=list(example), output_names=["out"], dynamic_axes=axes)
    return model, kind, size, vocab, path, example


def ort_session(path: str, threads: int):
    """ONNX Runtime on ``path`` with ``threads`` intra-op threads."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def _export(name: str, quick: bool, folder: str, threads: int):
    """``(torch model, kind, size, vocab, Predictor, ONNX Runtime session, export seconds, imported model)``."""
    from ...frontend import from_onnx
    from ...graph.export import export
    from ...runtime import Predictor
    model, kind, size, vocab, path, example = write_onnx(name, quick, folder)
    session = ort_session(path, threads)
    start = time.perf_counter()
    imported = from_onnx(path)
    predictor = Predictor(export(imported, example, path[:-5] + ".so"))
    return model, kind, size, vocab, predictor, session, time.perf_counter() - start, imported


def _rows(name, batch, parts, torch, repeat, peak, quick) -> list[dict]:
    model, kind, size, vocab, predictor, session, export_s, imported = parts
    arrays = inputs(kind, size, batch, vocab)
    tensors = tuple(torch.from_numpy(a) for a in arrays.values())
    compiled = torch.compile(model) if not quick else None

    def eager():
        with torch.inference_mode():
            return model(*tensors)

    def inductor():
        with torch.inference_mode():
            return compiled(*tensors)

    want = eager().numpy()
    got = predictor(**arrays)
    error = float(np.abs(got - want).max() / max(float(np.abs(want).max()), 1e-12))
    samplers = {"kiln": calls_sampler(lambda: predictor(**arrays)),
                "ort": calls_sampler(lambda: session.run(None, arrays)), "torch": calls_sampler(eager)}
    if compiled is not None:
        inductor()  # compiles for this batch before it is timed
        samplers["compiled"] = calls_sampler(inductor)
    sides = compare(samplers, repeat)
    work = gflop(imported, arrays)
    gflops = work / sides["kiln"]["median_s"]
    extra = {"export s": round(export_s, 1), "max rel. diff": error, "GFLOP": float(f"{work:.3g}"),
             "GFLOPS": round(gflops, 1), "of peak": f"{100 * gflops / peak:.0f}%" if peak else None}
    workload = f"{name}, batch {batch}"
    return [make_row(workload, "ms", sides["kiln"], label, sides.get(key), TARGET, extra=extra,
                     note=None if key in sides else "not run in --quick")
            for key, label in REFERENCES]


def run(context, repeat: int, quick: bool = False) -> list[dict]:
    """Per model and batch, a row against ONNX Runtime, PyTorch eager and
    torch.compile; one row saying why when a reference package is missing."""
    missing = [m for m in NEEDS if importlib.util.find_spec(m) is None]
    if missing or context.torch is None:
        note = f"needs {', '.join(missing or ['torch'])} (pip install 'kiln[test]'): not run"
        return [make_row("models", "ms", None, "-", None, TARGET, note=note)]
    torch = context.torch
    names = QUICK["models"] if quick else tuple(MODELS)
    batches = QUICK["batches"] if quick else BATCHES
    peak = context.header.get("fma_peak_gflops")
    rows = []
    with tempfile.TemporaryDirectory(prefix="kiln-models-") as folder:
        for name in names:
            torch.manual_seed(0)
            print(f"models: exporting {name}...", file=sys.stderr, flush=True)  # the suite takes a while
            parts = _export(name, quick, folder, context.threads)
            for batch in batches:
                print(f"models: timing {name} at batch {batch}...", file=sys.stderr, flush=True)
                rows += _rows(name, batch, parts, torch, repeat, peak, quick)
    return rows
