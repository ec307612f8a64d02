"""
Dynamic shapes, data-dependent ops and the dependency engine
============================================================

You will learn how to:

* push work to kiln's dependency engine and what it guarantees: writers of a
  variable run in push order, readers run together, errors surface at the
  next wait;
* see that ``kiln.nn`` runs every kernel through that engine: a Tensor's
  value is waited for only when you read it;
* compile one kernel for every batch size with a symbolic dim, and what nn
  does when shapes keep changing (specialize the first few, then go
  symbolic);
* use ops whose output length depends on the data (``masked_select``,
  ``nonzero``, ``unique``) — with gradients — and read their bounded shapes;
* update in place and accumulate gradients without temporaries, and see how
  much memory autograd keeps for backward.

Run: ``python tutorials/07_dynamic_shapes_and_engine.py`` (``KILN_TUTORIAL_SMALL=1``
for a quick run).
"""
# %%
# Setup
# -----
import os
import threading
import time

import numpy as np

import kiln
from kiln import nn
from kiln.runtime.engine import Engine
from kiln.te import get_op, sym

SMALL = os.environ.get("KILN_TUTORIAL_SMALL") == "1"
rng = np.random.default_rng(0)

# %%
# The engine
# ----------
#
# Each piece of state is a variable; a push declares which
# variables its function reads and writes, and returns at once.
engine = Engine()
a, b = engine.new_var("a"), engine.new_var("b")
log = []
engine.push(lambda: (time.sleep(0.05), log.append("write a")), writes=[a])
engine.push(lambda: log.append("read a (after the write)"), reads=[a])
engine.push(lambda: log.append("write b (independent: may run first)"), writes=[b])
engine.wait_for_all()
print("engine order:", log)
assert log.index("write a") < log.index("read a (after the write)")

# Readers of one variable run at the same time: one reader per worker thread
# meets the others at a barrier (it would time out if they ran one by one).
barrier = threading.Barrier(engine.workers, timeout=10)
for _ in range(engine.workers):
    engine.push(barrier.wait, reads=[a])
engine.wait_for_all()


# An error in pushed work is raised by the next wait that depends on it;
# work that reads the failed variable is skipped, other work goes on.
def fails():
    raise ValueError("a kernel failed")


engine.push(fails, writes=[a])
engine.push(lambda: log.append("never runs"), reads=[a], writes=[b])
try:
    engine.wait_for_var(b)
except ValueError as exc:
    print("wait_for_var(b) raised:", exc)
try:
    engine.wait_for_all()
except ValueError:
    pass
assert "never runs" not in log

# %%
# nn on the engine
# ----------------
#
# The forward pass, backward and the optimizer step only
# push kernels; ``loss.numpy()`` waits for the ones it depends on.
nn.init.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
opt = nn.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
x = nn.Tensor(rng.standard_normal((32, 64)).astype("float32"))
y = nn.Tensor(rng.integers(0, 10, 32).astype("int32"))
for step in range(5):
    loss = nn.SoftmaxLoss()(model(x), y)
    opt.reset_grad()
    loss.backward()
    opt.step()  # in place: the parameters' and momentum buffers' memory is reused
    print(f"step {step}: loss {loss.numpy():.4f}")

# %%
# Symbolic dims
# -------------
#
# One kernel for every batch size. The template pads the
# symbolic dim to its register tile, so the fast micro-kernel runs for every
# size and only the write-back checks bounds.
n = sym("n")
dense = kiln.build("dense", [(n, 64), (64, 32), (32,)], attrs={"relu": True})
w, bias = rng.standard_normal((64, 32)).astype("float32"), rng.standard_normal(32).astype("float32")
for rows in (1, 5, 50):
    xs = rng.standard_normal((rows, 64)).astype("float32")
    np.testing.assert_allclose(dense(xs, w, bias), np.maximum(xs @ w + bias, 0), rtol=1e-4, atol=1e-4)
print("one dense kernel served batches of 1, 5 and 50; vectorized:", "T.vectorized" in dense.script())

# Which kernel nn uses at each shape is decided by a kernel pool that the
# model owns (``model.kernel_pool``), per layer: each layer gets concrete
# kernels (the fastest code) for the first ``specialize_limit`` shapes it
# meets, then one kernel with the dims that differ from the nearest seen
# shape made symbolic (the batch). Ops outside a model take a pool you
# activate (here a fresh one, with this matmul as its site), else the
# process's default pool.
from kiln.runtime import KernelPool  # noqa: E402

pool, wt = KernelPool(), nn.Tensor(w)
sizes = 12 if not SMALL else 8
with pool.activate("x @ w"):
    for rows in range(1, sizes + 1):
        (nn.Tensor(rng.standard_normal((rows, 64)).astype("float32")) @ wt).numpy()
print(f"{sizes} batch sizes of a matmul: {len(pool.kernels('matmul'))} kernels "
      f"({pool.specialize_limit} specialized + 1 symbolic)")
assert len(pool.kernels("matmul")) == pool.specialize_limit + 1

# Two layers of one op keep a budget each: a model trained at 4 batch sizes
# runs concrete kernels in both of its dense layers, forward and backward.
mlp = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
for rows in (8, 16, 24, 32):
    logits = mlp(nn.Tensor(rng.standard_normal((rows, 64)).astype("float32")))
    nn.SoftmaxLoss()(logits, nn.Tensor(rng.integers(0, 10, rows).astype("int32"))).backward()
concrete = all(isinstance(d, int) for k in mlp.kernel_pool.kernels() for s in k.shapes for d in s)
print(f"2 dense layers x 4 batch sizes: {len(mlp.kernel_pool.kernels('dense'))} concrete dense kernels")
assert concrete and len(mlp.kernel_pool.kernels("dense")) == 8

# %%
# Data-dependent ops
# ------------------
#
# Their output length is known only when they run.
# infer_shape says so with a bounded dim; the kernel fills storage of the
# upper bound and returns the actual rows.
print("masked_select of a 4x6 tensor has shape", get_op("masked_select").infer_shape((4, 6), (4, 6)))
xs = rng.standard_normal((4, 6)).astype("float32")
t = nn.Tensor(xs, requires_grad=True)
mask = nn.Tensor(xs > 0.5)
picked = t.masked_select(mask)
print(f"picked {picked.shape[0]} of 24 values")
loss = (picked * picked).sum()
loss.backward()  # masked_select's gradient scatters back to where the mask was true
np.testing.assert_allclose(t.grad.numpy(), np.where(xs > 0.5, 2 * xs, 0), rtol=1e-5)
ints = nn.Tensor(rng.integers(0, 4, (3, 5)).astype("int32"))
print("unique:", ints.unique().numpy(), " nonzero rows:", ints.nonzero().shape[0])
np.testing.assert_array_equal(ints.unique().numpy(), np.unique(ints.numpy()))

# %%
# Memory
# ------
#
# Autograd keeps only what each op's gradient reads. relu's and
# tanh's gradients read their outputs, so the pre-activations are freed as
# soon as nothing else needs them; keeping everything (what autograd does
# without the declarations) holds them too.
deep = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, 10))
held = {}
from kiln.nn import tensor as nn_tensor  # noqa: E402

for keep_all in (True, False):
    nn_tensor.keep_all_for_backward(keep_all)
    out = nn.SoftmaxLoss()(deep(nn.Tensor(rng.standard_normal((256, 64)).astype("float32"))), nn.Tensor(y.numpy().repeat(8)))
    held[keep_all] = nn_tensor.saved_bytes(out)
nn_tensor.keep_all_for_backward(False)
print(f"kept for backward: {held[False] / 2**20:.2f} MiB with the declarations, "
      f"{held[True] / 2**20:.2f} MiB keeping everything")
assert held[False] < held[True]

# %%
# Summary
# -------
print("\nThe engine ordered and overlapped the work, one symbolic kernel served every size, the data-dependent "
      "ops matched numpy with gradients, and autograd kept less for backward.")
