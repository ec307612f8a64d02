"""The int8 suite (``kiln bench --suite models --int8``, or ``--suite int8``):
the models suite's ResNet-50, MobileNetV2 and transformers quantized after training.

Each model is written to ONNX as in the models suite, imported, exported in
float, quantized by ``kiln.quantize`` (calibrated on ``CALIBRATION`` batches
of the suite's random inputs; minmax ranges, weights per output channel) and
exported again. ONNX Runtime quantizes the same file on the same batches with
``quantize_static`` (QDQ, uint8 activations, int8 weights per channel,
minmax), the format its documentation recommends on x86. Per batch, kiln's
int8 module, kiln's float module and ONNX Runtime's int8 model are timed
interleaved; rows: kiln int8 against ONNX Runtime int8 (target 1.0) and
against kiln float (the speed-up: ``SPEEDUP`` on a CPU with AVX-512 VNNI, else
``SPEEDUP_NO_DOT``), each with the cosine similarity of kiln's int8 output to
its float output and to ONNX Runtime's int8 output; and ONNX Runtime's QDQ
file itself imported by ``kiln.frontend.from_onnx`` (its products fused into
kiln's int8 kernels, ``frontend/onnx_qdq.py``) against ONNX Runtime on that
file (target 1.0), with the cosine of their outputs; and likewise ONNX
Runtime's QOperator file of the same model (``QLinearConv``, ``QGemm``,
``QLinearAdd``...: ``frontend/onnx_qoperator.py``) against ONNX Runtime on it.

``--quick`` runs a 2-layer BERT of width 64 on 16 tokens at batch 1.
"""
from __future__ import annotations

import importlib.util
import logging
import sys
import tempfile
import time

import numpy as np

from ..rows import make_row
from ..timing import calls_sampler, compare
from . import models

TARGET = 1.0  # kiln's int8 latency at most ONNX Runtime's int8 latency
SPEEDUP, SPEEDUP_NO_DOT = 2.5, 1.5  # kiln float latency over kiln int8 latency
CALIBRATION = 4  # batches of 4 inputs
NAMES = ("ResNet-50", "MobileNetV2", "BERT-base", "GPT-2 small")
QUICK = {"models": ("BERT-base",), "batches": (1,)}


def cosine(a, b) -> float:
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    return float(a @ b / max(np.linalg.norm(a) * np.linalg.norm(b), 1e-300))


def _ort_int8(path: str, batches: list[dict], form: str = "QDQ") -> str:
    """ONNX Runtime's ``quantize_static`` of ``path`` (``form`` QDQ or QOperator, per channel, minmax) on ``batches``."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.items = iter(batches)

        def get_next(self):
            return next(self.items, None)

    prepared, out = path[:-5] + "_pre.onnx", path[:-5] + f"_{form}.onnx"
    logging.getLogger().setLevel(logging.ERROR)  # its per-tensor warnings
    quant_pre_process(path, prepared)
    quantize_static(prepared, out, Reader(), quant_format=getattr(QuantFormat, form), per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    return out


def _build(name: str, quick: bool, folder: str, threads: int) -> dict:
    from ...frontend import from_onnx
    from ...graph.export import export
    from ...nn.quantized import quantize
    from ...runtime import Predictor
    _, kind, size, vocab, path, example = models.write_onnx(name, quick, folder)
    calibration = [models.inputs(kind, size, 4, vocab, seed=100 + k) for k in range(CALIBRATION)]
    imported = from_onnx(path)
    start = time.perf_counter()
    float_module = Predictor(export(imported, example, path[:-5] + "_f.so"))
    float_s = time.perf_counter() - start
    start = time.perf_counter()
    quantized = quantize(imported, [tuple(b.values()) for b in calibration])
    int8_module = Predictor(export(quantized, example, path[:-5] + "_q.so"))
    int8_s = time.perf_counter() - start
    qdq_path = _ort_int8(path, calibration)
    session = models.ort_session(qdq_path, threads)
    start = time.perf_counter()
    qdq = from_onnx(qdq_path)
    qdq_module = Predictor(export(qdq, example, path[:-5] + "_qdq.so"))
    qdq_extra = {"import + export s": round(time.perf_counter() - start, 1),
                 "int8 layers": f"{sum(k == 'int8' for _, _, k, _ in qdq.qdq)}/{len(qdq.qdq)}"}
    qop_path = _ort_int8(path, calibration, "QOperator")
    start = time.perf_counter()
    qop = from_onnx(qop_path)
    qop_module = Predictor(export(qop, example, path[:-5] + "_qop.so"))
    qop_extra = {"import + export s": round(time.perf_counter() - start, 1),
                 "int8 layers": f"{sum(k == 'int8' for _, _, k, _ in qop.qdq)}/{len(qop.qdq)}"}
    layers = sum(r.kind == "int8" for r in quantized.report)
    return {"kind": kind, "size": size, "vocab": vocab, "float": float_module, "int8": int8_module, "ort": session,
            "qdq": qdq_module, "extra": {"float export s": round(float_s, 1), "quantize + export s": round(int8_s, 1),
                                         "int8 layers": f"{layers}/{len(quantized.report)}"},
            "qdq extra": qdq_extra, "qop": qop_module, "ort qop": models.ort_session(qop_path, threads),
            "qop extra": qop_extra}


def _rows(name: str, batch: int, parts: dict, repeat: int, vnni: bool) -> list[dict]:
    arrays = models.inputs(parts["kind"], parts["size"], batch, parts["vocab"])
    kiln_float, kiln_int8, session, qdq = parts["float"], parts["int8"], parts["ort"], parts["qdq"]
    qop, ort_qop = parts["qop"], parts["ort qop"]
    f, q, o, d = kiln_float(**arrays), kiln_int8(**arrays), session.run(None, arrays)[0], qdq(**arrays)
    p, op = qop(**arrays), ort_qop.run(None, arrays)[0]
    samplers = {"int8": calls_sampler(lambda: kiln_int8(**arrays)), "float": calls_sampler(lambda: kiln_float(**arrays)),
                "ort": calls_sampler(lambda: session.run(None, arrays)), "qdq": calls_sampler(lambda: qdq(**arrays)),
                "qop": calls_sampler(lambda: qop(**arrays)), "ort qop": calls_sampler(lambda: ort_qop.run(None, arrays))}
    sides = compare(samplers, repeat)
    extra = dict(parts["extra"], **{"cosine to float": round(cosine(q, f), 5),
                                    "cosine to ORT int8": round(cosine(q, o), 5),
                                    "ORT int8 cosine to float": round(cosine(o, f), 5)})
    workload = f"{name} int8, batch {batch}"
    speedup = SPEEDUP if vnni else SPEEDUP_NO_DOT
    qdq_extra = dict(parts["qdq extra"], **{"cosine to ORT int8": round(cosine(d, o), 5)})
    return [make_row(workload, "ms", sides["int8"], "ONNX Runtime int8", sides["ort"], TARGET, extra=extra),
            make_row(workload, "ms", sides["int8"], "kiln float", sides["float"], speedup, extra=extra,
                     note=None if vnni else "no AVX-512 VNNI: kiln.quantize gives AVX2's vpmaddubsw 7-bit weights"),
            make_row(f"{name} ONNX Runtime's QDQ file, batch {batch}", "ms", sides["qdq"], "ONNX Runtime int8",
                     sides["ort"], TARGET, extra=qdq_extra),
            make_row(f"{name} ONNX Runtime's QOperator file, batch {batch}", "ms", sides["qop"],
                     "ONNX Runtime on it", sides["ort qop"], TARGET,
                     extra=dict(parts["qop extra"], **{"cosine to ORT int8": round(cosine(p, op), 5)}))]


def run(context, repeat: int, quick: bool = False) -> list[dict]:
    """Per model and batch, kiln int8 against ONNX Runtime int8 and against kiln float."""
    from ...runtime.device import host
    missing = [m for m in models.NEEDS if importlib.util.find_spec(m) is None]
    if missing or context.torch is None:
        note = f"needs {', '.join(missing or ['torch'])} (pip install 'kiln[test]'): not run"
        return [make_row("int8", "ms", None, "-", None, TARGET, note=note)]
    vnni = "avx512vnni" in host().isa
    names = QUICK["models"] if quick else NAMES
    batches = QUICK["batches"] if quick else models.BATCHES
    rows = []
    with tempfile.TemporaryDirectory(prefix="kiln-int8-") as folder:
        for name in names:
            context.torch.manual_seed(0)
            print(f"int8: exporting {name} in float and int8...", file=sys.stderr, flush=True)
            parts = _build(name, quick, folder, context.threads)
            for batch in batches:
                print(f"int8: timing {name} at batch {batch}...", file=sys.stderr, flush=True)
                rows += _rows(name, batch, parts, repeat, vnni)
    return rows
