"""
Optimizing conv2d on a CPU, one step at a time
==============================================

You will learn how the matmul recipe carries over to a direct NCHW
convolution, measured beside kiln's default template:

naive -> padding as its own stage -> weights packed so a vector of output
channels is contiguous -> a register tile (output columns x channel vectors)
in a local accumulator laid out channels-innermost -> parallel.

Run: ``python tutorials/03_optimize_conv2d_cpu.py`` (``KILN_TUTORIAL_SMALL=1``
for a quick run).
"""
# %%
# Setup
# -----
import os

import numpy as np
import tvm
from tvm import te

import kiln
from kiln.te import get_op

SMALL = os.environ.get("KILN_TUTORIAL_SMALL") == "1"
N, C, H, O, K = (1, 8, 10, 16, 3) if SMALL else (1, 64, 56, 64, 3)
OC_TILE, OW_TILE = 16, 7 if H % 7 == 0 else 5  # 1 AVX-512 vector of channels x output columns
attrs = {"padding": 1}
target = kiln.cpu()
op = get_op("conv2d")
shapes = [(N, C, H, H), (O, C, K, K)]
rng = np.random.default_rng(0)
x_np, w_np = rng.random(shapes[0], dtype=np.float32), rng.random(shapes[1], dtype=np.float32)
want = op.reference(x_np, w_np, **op.parse_attrs(attrs))
flops = op.flops(shapes, **op.parse_attrs(attrs))
x, w = tvm.runtime.tensor(x_np), tvm.runtime.tensor(w_np)


def declare():
    """kiln's own declaration of conv2d: a padding stage and the convolution."""
    parsed = op.parse_attrs(attrs)
    X = te.placeholder(shapes[0], "float32", name="x")
    W = te.placeholder(shapes[1], "float32", name="w")
    return tvm.s_tir.Schedule(te.create_prim_func([X, W, op.compute(X, W, **parsed)]))


def report(step, sch):
    executable = tvm.compile(sch.mod, target=target.tvm)
    out = tvm.runtime.empty(want.shape, "float32")
    executable(x, w, out)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-3)
    seconds = executable.mod.time_evaluator("main", tvm.cpu(), number=1, repeat=3, min_repeat_ms=20)(x, w, out).median
    loops = [line.strip() for line in sch.mod.script().splitlines() if line.strip().startswith("for ")]
    print(f"\n== {step}: {flops / seconds / 1e9:.1f} GFLOPS")
    print("\n".join("   " + line for line in loops))


# %%
# 1. Naive
# --------
#
# The padding is inlined, so every input read checks the borders.
sch = declare()
sch.compute_inline(sch.get_sblock("conv2d_pad"))
report("naive (padding inlined)", sch)

# %%
# 2. Padding as a stage
# ---------------------
#
# The padding runs as its own stage, so the convolution's loads need no bounds checks.
report("padding as a separate stage", declare())


# %%
# 3-5. Vectorize over output channels
# -----------------------------------
#
# Pack the weights [O/16, C, K, K, 16] so
# 16 channels are one contiguous vector; keep a tile of OW_TILE output columns
# x 16 channels in a local accumulator whose layout puts channels innermost;
# then run (channel block, output row) tiles in parallel.
def tiled(parallel):
    sch = declare()
    conv = sch.get_sblock("conv2d")
    sch.cache_read(conv, 1, "global")
    sch.transform_layout(conv, ("read", 1), lambda o, i, kh, kw: (o // OC_TILE, i, kh, kw, o % OC_TILE))
    n, o, y, z, rc, ry, rx = sch.get_loops(conv)
    oo, oi = sch.split(o, [None, OC_TILE])
    zo, zi = sch.split(z, [None, OW_TILE])
    sch.reorder(n, oo, y, zo, rc, ry, rx, zi, oi)
    acc = sch.cache_write(conv, 0, "local")
    sch.reverse_compute_at(acc, zo)
    sch.transform_layout(conv, ("write", 0), lambda n_, o_, y_, z_: (n_, y_, z_, o_))
    sch.vectorize(oi)
    sch.unroll(zi)
    sch.unroll(rx)
    outer = sch.fuse(n, oo, y)
    if parallel:
        sch.parallel(outer)
    sch.decompose_reduction(conv, rc)
    return sch


report("channel vectors + register tile", tiled(parallel=False))
report("+ parallel", tiled(parallel=True))

# %%
# 6. kiln's template
# ------------------
#
# kiln's default template: the same structure, tiles chosen from the
# shape and the CPU, NCHW and NHWC.
kernel = kiln.build("conv2d", shapes, attrs=attrs)
np.testing.assert_allclose(kernel(x_np, w_np), want, rtol=1e-4, atol=1e-3)
print(f"\n== kiln default template: {flops / kernel.time(x, w)['median'] / 1e9:.1f} GFLOPS")
print(f"   knobs: {kernel.resolved_config()}")
