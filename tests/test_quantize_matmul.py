"""Products of two quantized activations (``matmul_int8``): ``vpdpbusd`` on a
CPU with AVX-512 VNNI (read in the generated code), exact without it, a
symbolic batch served, bad zero points and a symbolic N refused clearly; and
attention's products in ONNX Runtime's QDQ and QOperator files run on it,
reported as int8, agreeing with ONNX Runtime."""
import re

import numpy as np
import pytest

import kiln
from kiln.errors import AttrError, KilnError, ShapeError
from kiln.runtime.device import cpu, host
from kiln.te import get_op, sym

DTYPES = ["uint8", "uint8"]
ATTRS = {"a_zero_point": 131, "b_zero_point": 3, "scale": 0.002}
VNNI = cpu("znver4")


def _codes(rng, *shapes):
    return [rng.integers(0, 256, s).astype(np.uint8) for s in shapes]


def _want(a, b, attrs=ATTRS):
    return get_op("matmul_int8").reference(a, b, **get_op("matmul_int8").parse_attrs(attrs))


@pytest.mark.parametrize("mcpu", ["znver4", "sapphirerapids"])
def test_attentions_product_is_vpdpbusd_on_a_vnni_cpu(mcpu):
    kernel = kiln.build("matmul_int8", [(12, 128, 64), (12, 64, 128)], DTYPES, ATTRS, target=cpu(mcpu))
    assert kernel.template == "int8_matmul.schedule_matmul_int8"
    assert re.search(r"vpdpbusd\s+%zmm", kernel.assembly())


def test_without_vnni_it_is_exact_too():
    target = cpu("x86-64-v3")
    kernel = kiln.build("matmul_int8", [(2, 8, 32), (2, 32, 24)], DTYPES, ATTRS, target=target)
    assert "vpdpbusd" not in kernel.assembly()
    if not target.runs_here:
        pytest.skip(f"{host().mcpu} cannot run {target.mcpu} code")
    a, b = _codes(np.random.default_rng(0), (2, 8, 32), (2, 32, 24))
    np.testing.assert_allclose(kernel(a, b), _want(a, b), rtol=1e-6)


def test_a_symbolic_batch_and_rows_are_served_and_a_symbolic_n_is_refused():
    n, m = sym("n"), sym("m")
    batched = kiln.build("matmul_int8", [(n, 16, 64), (n, 64, 32)], DTYPES, ATTRS)
    assert batched.template == "int8_matmul.schedule_matmul_int8"
    rows = kiln.build("matmul_int8", [(2, m, 64), (2, 64, 32)], DTYPES, ATTRS)  # the generic schedule: exact
    rng = np.random.default_rng(1)
    for batch, length in ((1, 16), (3, 5)):
        a, b = _codes(rng, (batch, 16, 64), (batch, 64, 32))
        np.testing.assert_allclose(batched(a, b), _want(a, b), rtol=1e-6)
        a, b = _codes(rng, (2, length, 64), (2, 64, 32))
        np.testing.assert_allclose(rows(a, b), _want(a, b), rtol=1e-6)
    with pytest.raises(ShapeError, match="static N"):
        kiln.build("matmul_int8", [(2, 16, 64), (2, 64, sym("c"))], DTYPES, ATTRS)


def test_bad_operands_are_refused_naming_what_was_expected():
    with pytest.raises(AttrError, match="a_zero_point.*0..255"):
        kiln.build("matmul_int8", [(4, 8), (8, 16)], DTYPES, {"a_zero_point": 300})
    with pytest.raises(KilnError, match="uint8"):
        kiln.build("matmul_int8", [(4, 8), (8, 16)], ["int8", "uint8"])
    with pytest.raises(ShapeError, match=r"\(\.\.\., M, K\) and \(\.\.\., K, N\)"):
        kiln.build("matmul_int8", [(2, 4, 8), (3, 8, 16)], DTYPES)


torch = pytest.importorskip("torch", reason="the float model is written in PyTorch")
ort = pytest.importorskip("onnxruntime", reason="ONNX Runtime writes the quantized files and is the oracle")


class _Attention(torch.nn.Module):
    """One self-attention of 2 heads of 8: ``q @ k^T`` and ``p @ v`` multiply two activations."""

    def __init__(self):
        super().__init__()
        self.qkv, self.out = torch.nn.Linear(16, 48), torch.nn.Linear(16, 16)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = (t.reshape(b, s, 2, 8).transpose(1, 2) for t in self.qkv(x).chunk(3, dim=-1))
        p = torch.softmax(q @ k.transpose(-1, -2) / 8 ** 0.5, dim=-1)
        return self.out((p @ v).transpose(1, 2).reshape(b, s, 16))


@pytest.fixture(scope="module", params=["QDQ", "QOperator"])
def quantized_attention(request, tmp_path_factory):
    """(form, path of ONNX Runtime's quantized file of ``_Attention``, a random input)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    folder, rng = tmp_path_factory.mktemp("attention"), np.random.default_rng(0)
    torch.manual_seed(0)
    path, qpath = folder / "f.onnx", folder / f"{request.param}.onnx"
    torch.onnx.export(_Attention().eval(), torch.zeros(1, 12, 16), str(path), dynamo=False, input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": {0: "n"}})
    batches = iter([{"x": rng.standard_normal((4, 12, 16)).astype(np.float32)} for _ in range(4)])

    class Reader(CalibrationDataReader):
        def get_next(self):
            return next(batches, None)

    quantize_static(str(path), str(qpath), Reader(), quant_format=getattr(QuantFormat, request.param),
                    per_channel=True, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    return request.param, qpath, rng.standard_normal((3, 12, 16)).astype(np.float32)


def test_attentions_products_in_a_quantized_file_run_int8_and_agree_with_onnx_runtime(quantized_attention):
    from kiln.frontend import from_onnx
    form, qpath, x = quantized_attention
    model = from_onnx(qpath, target=VNNI)
    products = [row for row in model.qdq if row[1] in ("MatMul", "QLinearMatMul")]
    assert len(products) >= 2 and all(kind == "int8" for _, _, kind, _ in products), model.qdq
    want = ort.InferenceSession(str(qpath), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = model(kiln.Tensor(x)).numpy()
    assert got.ravel() @ want.ravel() / np.linalg.norm(got) / np.linalg.norm(want) > 0.999, form
    assert np.abs(got - want).max() <= 0.05 * np.abs(want).max()  # a rounding of a code apart, here and there
