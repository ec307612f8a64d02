"""int8 layers hand each other uint8 codes in an exported model
(graph.requantize): a layer read only by int8 convolutions of one
quantization writes their codes, a residual read as codes is taken back to
floats in its reader's write-back (``dequantize_add``), and whatever a float
op reads stays float; the module computes what the quantized model computes
eagerly, up to the residual's rounding."""
import numpy as np
import pytest

import kiln
from kiln import nn
from kiln.graph import optimize, trace
from kiln.runtime import Predictor
from kiln.runtime.device import cpu

#: a CPU with AVX-512 VNNI: what kiln.quantize decides for (the kernels run on the host, exact either way)
VNNI = cpu("znver4")


class _Residual(nn.Module):
    """A stem (with ResNet's max pool where ``pool``), then a bottleneck-like
    block with an identity shortcut, then a float head."""

    def __init__(self, pool: bool = False):
        self.stem = nn.Conv(3, 16, 3)
        self.pool = nn.MaxPool2d(3, stride=2, padding=1) if pool else None
        self.a = nn.Conv(16, 16, 3)
        self.b = nn.Conv(16, 16, 1)
        self.side = 3 if pool else 6
        self.head = nn.Linear(16 * self.side ** 2, 10)

    def forward(self, x):
        h = self.stem(x).relu()
        if self.pool is not None:
            h = self.pool(h)
        y = (self.b(self.a(h).relu()) + h).relu()
        return self.head(y.reshape((y.shape[0], 16 * self.side ** 2)))


def _quantized(pool: bool = False):
    nn.init.manual_seed(0)
    model, rng = _Residual(pool).eval(), np.random.default_rng(1)
    calibration = [rng.standard_normal((8, 3, 6, 6)).astype(np.float32) for _ in range(2)]
    return model, kiln.quantize(model, calibration, target=VNNI), rng.standard_normal((5, 3, 6, 6)).astype(np.float32)


def _cosine(a, b):
    return float(a.ravel() @ b.ravel() / np.linalg.norm(a) / np.linalg.norm(b))


def test_layers_read_by_int8_convolutions_write_their_codes_and_a_residual_is_dequantized_in_place():
    _, quantized, x = _quantized()
    graph = optimize(trace(quantized, x[:1]), kiln.cpu())
    stem, a, b = (n for n in graph.nodes if n.op.name == "conv2d_int8")
    # the stem's output: the input of a (as codes) and b's residual; a's: b's input alone
    assert stem.outputs[0].dtype == "uint8" and stem.epilogue[-1][0].name == "quantize"
    assert a.outputs[0].dtype == "uint8" and a.inputs[0] is stem.outputs[0]
    assert [op.name for op, _, _ in b.epilogue].count("dequantize_add") == 1
    _, attrs, (codes,) = next(e for e in b.epilogue if e[0].name == "dequantize_add")
    assert codes is stem.outputs[0] and attrs["scale"] == a.attrs["in_scale"]
    # b's output is read by the int8 head's own quantize, an elementwise op: it joins b's write-back
    assert b.outputs[0].dtype == "uint8" and b.epilogue[-1][0].name == "quantize"


def test_a_max_pool_between_int8_layers_pools_the_codes():
    _, quantized, x = _quantized(pool=True)
    graph = optimize(trace(quantized, x[:1]), kiln.cpu())
    stem, a, b = (n for n in graph.nodes if n.op.name == "conv2d_int8")
    pool = next(n for n in graph.nodes if n.op.name == "max_pool2d")
    # the stem writes codes, the pool pools them: a reads them, b adds them back as floats
    assert stem.outputs[0].dtype == "uint8" and pool.inputs[0] is stem.outputs[0]
    assert pool.outputs[0].dtype == "uint8" and a.inputs[0] is pool.outputs[0]
    _, attrs, (codes,) = next(e for e in b.epilogue if e[0].name == "dequantize_add")
    assert codes is pool.outputs[0] and attrs["scale"] == a.attrs["in_scale"]


@pytest.mark.parametrize("pool", [False, True], ids=["residual", "max pool"])
def test_the_module_with_codes_between_layers_computes_what_the_quantized_model_does(tmp_path, pool):
    model, quantized, x = _quantized(pool)
    predictor = Predictor(kiln.export(quantized, x[:1], tmp_path / "res.so"))
    got, eager, floats = predictor(x), quantized(kiln.Tensor(x)).numpy(), model(kiln.Tensor(x)).numpy()
    # the residual's codes add at most half a step of the stem's output to what eager int8 computes (a max of
    # codes is exactly the codes of the max)
    assert _cosine(got, eager) > 0.999 and _cosine(got, floats) > 0.995


def test_a_value_two_int8_layers_quantize_differently_stays_float():
    nn.init.manual_seed(3)
    model = nn.Sequential(nn.Conv(4, 8, 3), nn.ReLU()).eval()
    left, right = nn.Conv(8, 16, 1), nn.Conv(8, 16, 1)

    class _Fork(nn.Module):
        def __init__(self):
            self.trunk, self.left, self.right = model, left, right

        def forward(self, x):
            h = self.trunk(x)
            return self.left(h) + self.right(h * 2.0)  # the right branch reads h through a float op

    rng = np.random.default_rng(4)
    quantized = kiln.quantize(_Fork().eval(), rng.standard_normal((4, 4, 5, 5)).astype(np.float32), target=VNNI)
    graph = optimize(trace(quantized, rng.standard_normal((1, 4, 5, 5)).astype(np.float32)), kiln.cpu())
    trunk = next(n for n in graph.nodes if n.op.name == "conv2d_int8")  # the first in order
    assert trunk.outputs[0].dtype == "float32"


@pytest.mark.parametrize("dtype,zero_point,reciprocal", [("uint8", 119, False), ("int8", 0, True), ("uint8", 0, True)])
def test_a_fused_fake_quantization_gives_its_quantize_and_dequantizes_numbers(dtype, zero_point, reciprocal):
    import tvm
    from tvm import te

    from kiln.te import get_op
    from kiln.te.quantize import fake_quantized

    q_attrs = {"scale": 0.0078, "zero_point": zero_point, "dtype": dtype, "reciprocal": reciprocal}
    dq_attrs = {"scale": 0.0078, "zero_point": zero_point, "dtype": dtype}
    x = te.placeholder((4096,), "float32", name="x")
    pair = get_op("dequantize").compute(get_op("quantize").compute(x, **q_attrs), **dq_attrs)
    rng = np.random.default_rng(0)
    data = np.concatenate([rng.normal(0, 1.5, 4000), np.arange(-48, 48) * 0.0039,  # ties at half steps
                           [np.nan, np.inf, -np.inf, 1e30, -1e30, 0.0, -0.0]]).astype(np.float32)[:4096]
    data = np.pad(data, (0, 4096 - data.size))
    outs = []
    for out in (pair, fake_quantized(x, q_attrs, dq_attrs)):
        lib = tvm.compile(te.create_prim_func([x, out]), target=cpu().tvm)
        got = tvm.runtime.empty((4096,), "float32", tvm.cpu())
        lib(tvm.runtime.tensor(data), got)
        outs.append(got.numpy())
    assert np.array_equal(outs[0], outs[1])  # as numbers: -0.0 may come back as it went in, where the pair gives 0.0
    assert not np.isnan(outs[1]).any() and np.unique(outs[1]).size > 100
