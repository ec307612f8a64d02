"""Feature vectors for the cost model: the config, the scheduled loop nest, the task.

* config features: one number per knob (log2 of numeric values, the option
  index of the others; one number per factor of a split);
* loop-nest features, read from the scheduled TensorIR: loops by kind
  (parallel, vectorized, unrolled, serial, GPU thread) and their extents, the
  register tile (``local`` buffers), shared-memory tiles and packed copies
  (``global`` buffers) in bytes,
  the number of stages and the loop depth;
* task features: log2 of every input dim, so records of other shapes of the
  same op can seed the model (transfer learning).

Features are named, so vectors from different tasks line up by name; a
feature a task lacks is NaN, which XGBoost treats as missing.
"""
from __future__ import annotations

import math

import numpy as np
import tvm_ffi
from tvm import tirx
from tvm.s_tir.stmt import SBlock

from ..schedules.config import Knob


def _log2(x: float) -> float:
    return math.log2(1.0 + max(0.0, float(x)))


def config_features(knobs: dict, config: dict) -> dict:
    out = {}
    for name, knob in knobs.items():
        value = config.get(name, knob.default)
        if isinstance(knob, Knob):
            numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
            out[f"knob.{name}"] = _log2(value) if numeric else float(knob.options.index(value))
        else:
            for i, f in enumerate(value):
                out[f"knob.{name}.{i}"] = _log2(f)
    return out


def loop_features(func) -> dict:
    """Counts and extents of the loops of a scheduled PrimFunc, by kind."""
    stats = {"parallel": 0.0, "vectorized": 0.0, "unrolled": 0.0, "serial": 0.0, "thread": 0.0}
    counts = dict.fromkeys(stats, 0)
    buffers = {"local": 0.0, "shared": 0.0, "global": 0.0}
    blocks = 0

    def visit_for(node):
        kind = {tirx.ForKind.PARALLEL: "parallel", tirx.ForKind.VECTORIZED: "vectorized",
                tirx.ForKind.UNROLLED: "unrolled", tirx.ForKind.THREAD_BINDING: "thread"}.get(node.kind, "serial")
        extent = node.extent.value if hasattr(node.extent, "value") else 1
        stats[kind] += math.log2(max(1, extent))
        counts[kind] += 1

    def visit_block(node):
        nonlocal blocks
        blocks += 1
        for buf in node.alloc_buffers:
            nbytes = _buffer_bytes(buf)
            scope = next((k for k in ("local", "shared") if buf.scope().startswith(k)), "global")
            buffers[scope] += nbytes

    tvm_ffi.structural_walk(func.body, [(tirx.For, visit_for), (SBlock, visit_block)], order="post")
    out = {f"loop.{k}.log_extent": v for k, v in stats.items()}
    out.update({f"loop.{k}.count": float(v) for k, v in counts.items()})
    out.update({f"buffer.{k}.log_bytes": _log2(v) for k, v in buffers.items()})
    out["blocks"] = float(blocks)
    return out


def _buffer_bytes(buf) -> float:
    n = 1
    for d in buf.shape:
        n *= int(d.value) if hasattr(d, "value") else 1
    digits = "".join(c for c in str(buf.dtype) if c.isdigit())
    return n * max(1, int(digits or 8) // 8)


def task_features(task) -> dict:
    out = {}
    for i, shape in enumerate(task.shapes):
        for j, d in enumerate(shape):
            out[f"task.in{i}.{j}"] = _log2(d)
    out["task.log_flops"] = _log2(task.flops)
    return out


def matrix(rows: list[dict], names: list[str] | None = None) -> tuple[np.ndarray, list[str]]:
    """Stack named feature dicts into a float matrix (NaN where one is missing)."""
    names = names or sorted({k for r in rows for k in r})
    out = np.full((len(rows), len(names)), np.nan, dtype=np.float32)
    col = {n: i for i, n in enumerate(names)}
    for r, row in enumerate(rows):
        for k, v in row.items():
            if k in col:
                out[r, col[k]] = v
    return out, names
