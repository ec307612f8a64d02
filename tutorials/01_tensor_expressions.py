"""
Tensor expressions, and a custom kiln op
========================================

You will learn how to:

* declare a computation as a TVM tensor expression and look at its loop nest;
* schedule, compile and run it;
* register it as a kiln op — shape rule, dtype rule, numpy reference and a
  gradient written with other ops — using fake quantization as the example:
  ``round(clip(scale * x, -128, 127)) / scale`` with a straight-through
  gradient (1 inside the clip range, 0 outside).

Run: ``python tutorials/01_tensor_expressions.py``.
"""
# %%
# A tensor expression
# -------------------
#
# A tensor expression says *what* each output element is; the loop nest that
# computes it is a separate, schedulable object.
import numpy as np
import tvm
from tvm import te, tirx

import kiln
from kiln.te import Op, call, get_op, register

n = 1000
x = te.placeholder((n,), "float32", name="x")
y = te.compute((n,), lambda i: x[i] * 2.0 + 1.0, name="y")
func = te.create_prim_func([x, y])
print(func.script())

# %%
# Schedule, compile, run
# ----------------------
#
# Schedule it (split, vectorize, parallel), compile for this CPU, run.
sch = tvm.s_tir.Schedule(func)
(i,) = sch.get_loops(sch.get_sblock("y"))
outer, inner = sch.split(i, [None, 16])
sch.vectorize(inner)
sch.parallel(outer)
print(sch.mod.script())
executable = tvm.compile(sch.mod, target=kiln.cpu().tvm)
a = np.random.default_rng(0).random(n, dtype=np.float32)
out = tvm.runtime.empty((n,), "float32")
executable(tvm.runtime.tensor(a), out)
np.testing.assert_allclose(out.numpy(), a * 2 + 1, rtol=1e-6)

# %%
# A kiln op
# ---------
#
# A kiln op is one class: attributes, shape and dtype rules, the compute,
# the gradient (made of registered ops, so it is itself differentiable) and a
# numpy reference that tests compare with. Schedules come from kiln's
# templates; this one is elementwise, so it gets the fused, vectorized,
# parallel injective template.
LOW, HIGH = -128.0, 127.0


class FakeQuant(Op):
    name = "fake_quant"
    dtypes = ("float32", "float64")
    attrs = {"scale": kiln.te.Attr(lambda op, arg, v: float(v), doc="quantization scale")}

    def infer_shape(self, x, scale):
        return x

    def compute(self, x, scale):
        def body(*i):
            s = tirx.const(scale, str(x.dtype))
            q = tirx.max(tirx.min(x(*i) * s, tirx.const(HIGH, str(x.dtype))), tirx.const(LOW, str(x.dtype)))
            return tirx.round(q) / s
        return te.compute(x.shape, body, name=self.name, tag="injective")

    def reference(self, x, scale):
        return (np.round(np.clip(x * scale, LOW, HIGH)) / scale).astype(x.dtype)

    def gradient(self, g, node):
        # straight-through: pass the gradient where scale * x was inside the range
        scaled = node.inputs[0] * node.attrs["scale"]
        inside = (scaled >= LOW).astype(g.dtype) * (-scaled >= -HIGH).astype(g.dtype)
        return (g * inside,)


if "fake_quant" not in kiln.te.list_ops():  # registering twice in one process is an error
    register(FakeQuant)

# %%
# Build and run the op
# --------------------
#
# Build and run it like any other op.
kernel = kiln.build("fake_quant", [(4096,)], attrs={"scale": 10.0})
data = np.random.default_rng(1).uniform(-20, 20, 4096).astype("float32")
np.testing.assert_allclose(kernel(data), get_op("fake_quant").reference(data, scale=10.0), atol=1e-6)
print(kernel.resolved_config())

# %%
# Its gradient
# ------------
#
# Its gradient, through autograd: 1 where ``10 * x`` is inside [-128, 127], else 0.
t = kiln.Tensor(data, requires_grad=True)
call("fake_quant", t, scale=10.0).sum().backward()
expected = ((data * 10 >= LOW) & (data * 10 <= HIGH)).astype("float32")
np.testing.assert_array_equal(t.grad.numpy(), expected)
print(f"fake_quant: forward matches numpy; straight-through gradient passes {int(expected.sum())} of 4096")
