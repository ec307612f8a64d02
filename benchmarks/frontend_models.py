"""The frontends on the models users bring, at their real sizes: ResNet-50,
MobileNetV2 (224x224), BERT-base and GPT-2 small (sequence 128), each
imported from PyTorch (``from_torch``) and from its ONNX file
(``from_onnx``), exported with ``kiln.export`` and compared with PyTorch
eager and ONNX Runtime: the output's error relative to its largest value,
the import and export times (cold or warm kernel cache, as it is), and the
latency of one call, kiln's exported module against ONNX Runtime and
PyTorch eager, measured interleaved at the same thread count.

Run: ``python benchmarks/frontend_models.py [--models resnet50,bert]
[--batch 1] [--repeat 20] [--json FILE]``. Needs torch, onnx, onnxruntime
and transformers.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np

import kiln
from kiln.bench import torch_models
from kiln.bench.timing import calls_sampler, compare
from kiln.frontend import from_onnx, from_torch
from kiln.runtime import Predictor

MODELS = ("resnet50", "mobilenet_v2", "bert", "gpt2")


def build(name: str, batch: int):
    """``(torch module, example args as tensors, input names, dynamic axes)``."""
    import torch
    gen = torch.Generator().manual_seed(0)
    if name in ("resnet50", "mobilenet_v2"):
        model = torch_models.resnet() if name == "resnet50" else torch_models.mobilenet_v2()
        return model, (torch.randn(batch, 3, 224, 224, generator=gen),), ["image"], {0: "batch"}
    model = torch_models.HiddenStates(torch_models.bert() if name == "bert" else torch_models.gpt2())
    ids = torch.randint(0, 30000, (batch, 128), generator=gen)
    return model, (ids, torch.ones(batch, 128, dtype=torch.long)), ["input_ids", "attention_mask"], \
        {0: "batch", 1: "sequence"}


def relative(got, want) -> float:
    return float(np.abs(np.asarray(got) - want).max() / max(np.abs(want).max(), 1e-12))


def run_model(name: str, batch: int, repeat: int, folder: Path) -> dict:
    import onnxruntime as ort
    import torch
    model, args, names, axes = build(name, batch)
    arrays = {n: a.numpy() for n, a in zip(names, args)}
    with torch.no_grad():
        want = model(*args).numpy()
    onnx_path = folder / f"{name}.onnx"
    torch.onnx.export(model, args, str(onnx_path), dynamo=False, input_names=names, output_names=["out"],
                      dynamic_axes={n: dict(axes) for n in names})
    options = ort.SessionOptions()
    options.intra_op_num_threads = torch.get_num_threads()
    session = ort.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])
    ort_out = session.run(None, arrays)[0]
    row = {"model": name, "batch": batch, "ort_vs_torch": relative(ort_out, want)}
    predictors = {}
    for frontend in ("torch", "onnx"):
        start = time.perf_counter()
        imported = from_torch(model, args) if frontend == "torch" else from_onnx(onnx_path)
        row[f"{frontend}_import_s"] = round(time.perf_counter() - start, 2)
        start = time.perf_counter()
        names_of = [spec.name for spec in imported.inputs]  # from_torch names them after the forward's parameters
        path = kiln.export(imported, dict(zip(names_of, arrays.values())), folder / f"{name}_{frontend}.so")
        row[f"{frontend}_export_s"] = round(time.perf_counter() - start, 1)
        predictors[frontend] = Predictor(path)
        got = predictors[frontend](*arrays.values())
        row[f"{frontend}_error"] = relative(got, want if frontend == "torch" else ort_out)
    kiln_call = predictors["onnx"]
    with torch.no_grad():
        times = compare({"kiln": calls_sampler(lambda: kiln_call(*arrays.values())),
                         "onnxruntime": calls_sampler(lambda: session.run(None, arrays)),
                         "torch": calls_sampler(lambda: model(*args))}, repeat)
    for side, stats in times.items():
        row[f"{side}_ms"] = round(stats["median_s"] * 1e3, 3)
    row["kiln_over_ort"] = round(row["kiln_ms"] / row["onnxruntime_ms"], 2)
    row["kiln_over_torch"] = round(row["kiln_ms"] / row["torch_ms"], 2)
    return row


def table(rows) -> str:
    lines = ["| model, batch | error vs PyTorch (from_torch) | error vs ONNX Runtime (from_onnx) | import s (torch / "
             "onnx) | export s (torch / onnx) | kiln ms | ONNX Runtime ms | PyTorch ms | kiln / ORT |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']}, {r['batch']} | {r['torch_error']:.1e} | {r['onnx_error']:.1e} | "
                     f"{r['torch_import_s']} / {r['onnx_import_s']} | {r['torch_export_s']} / {r['onnx_export_s']} | "
                     f"{r['kiln_ms']} | {r['onnxruntime_ms']} | {r['torch_ms']} | {r['kiln_over_ort']} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)}")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--json", help="also write the rows to this JSON file")
    args = parser.parse_args()
    import torch
    torch.set_num_threads(int(os.environ.get("TVM_NUM_THREADS", os.cpu_count() or 1)))
    rows = []
    with tempfile.TemporaryDirectory(prefix="kiln-frontend-models-") as folder:
        for name in args.models.split(","):
            rows.append(run_model(name, args.batch, args.repeat, Path(folder)))
            print(json.dumps(rows[-1]), flush=True)
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
