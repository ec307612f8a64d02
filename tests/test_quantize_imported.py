"""``kiln.quantize`` on imported models: the products of an ONNX graph
(``Gemm`` with its weight transposed in the graph, ``MatMul`` on an
initializer) and of a PyTorch module become int8 under their source names,
export, and stay close to the float model."""
import numpy as np
import pytest

import kiln
from kiln.runtime import Predictor
from kiln.runtime.device import cpu

onnx = pytest.importorskip("onnx", reason="imported models need the onnx package")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from kiln.frontend import from_onnx, from_torch  # noqa: E402

#: a CPU with AVX-512 VNNI: what kiln.quantize decides for (the kernels run on the host, exact either way)
VNNI = cpu("znver4")


def _cosine(a, b) -> float:
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def _onnx_mlp(rng):
    """x (N, 32) -> Gemm(transB=1, 64) -> Relu -> MatMul(64 x 10) -> Add."""
    inits = [numpy_helper.from_array(rng.standard_normal((64, 32)).astype(np.float32) * 0.2, "fc1.weight"),
             numpy_helper.from_array(rng.standard_normal(64).astype(np.float32) * 0.1, "fc1.bias"),
             numpy_helper.from_array(rng.standard_normal((64, 10)).astype(np.float32) * 0.2, "head_w"),
             numpy_helper.from_array(rng.standard_normal(10).astype(np.float32) * 0.1, "head_b")]
    nodes = [helper.make_node("Gemm", ["x", "fc1.weight", "fc1.bias"], ["h"], transB=1),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "head_w"], ["m"]),
             helper.make_node("Add", ["m", "head_b"], ["y"])]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 10])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_an_onnx_models_products_quantize_under_their_initializer_names_and_export(tmp_path):
    rng = np.random.default_rng(0)
    imported = from_onnx(_onnx_mlp(rng))
    calibration = [rng.standard_normal((16, 32)).astype(np.float32) for _ in range(3)]
    quantized = kiln.quantize(imported, calibration, target=VNNI)
    assert [(r.name, r.kind) for r in quantized.report] == [("fc1", "int8"), ("head_w", "int8")]
    assert all(r.error < 0.02 for r in quantized.report)
    x = rng.standard_normal((5, 32)).astype(np.float32)
    eager = quantized(kiln.Tensor(x)).numpy()
    assert _cosine(eager, imported(kiln.Tensor(x)).numpy()) > 0.999
    predictor = Predictor(kiln.export(quantized, calibration[0][:1], tmp_path / "q.so"))
    np.testing.assert_allclose(predictor(x), eager, rtol=1e-5, atol=1e-5)
    skipped = kiln.quantize(imported, calibration, skip=("first",), target=VNNI)
    assert [r.kind for r in skipped.report] == ["float", "int8"]


def test_a_torch_modules_linear_layers_quantize_under_their_state_dict_names():
    torch = pytest.importorskip("torch", reason="the module is written in PyTorch")
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(24, 48), torch.nn.GELU(), torch.nn.Linear(48, 6)).eval()
    example = torch.randn(4, 24)
    imported = from_torch(module, (example,))
    rng = np.random.default_rng(1)
    quantized = kiln.quantize(imported, [rng.standard_normal((8, 24)).astype(np.float32)], target=VNNI)
    assert [(r.name, r.kind) for r in quantized.report] == [("0", "int8"), ("2", "int8")]
    with torch.no_grad():
        want = module(example).numpy()
    assert _cosine(quantized(kiln.Tensor(example.numpy())).numpy(), want) > 0.999


def test_kiln_export_int8_of_an_onnx_file(tmp_path, capsys):
    import json

    from kiln.cli import main
    from kiln.runtime.device import host

    rng = np.random.default_rng(4)
    model, path, calib = _onnx_mlp(rng), tmp_path / "mlp.onnx", tmp_path / "calib.npy"
    onnx.save(model, str(path))
    np.save(calib, rng.standard_normal((64, 32)).astype(np.float32))
    out = tmp_path / "q.so"
    assert main(["export", str(path), "--out", str(out), "--int8", "--calibration", str(calib), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)["int8"]
    kind = "int8" if "avx512vnni" in host().isa else "float"  # the host decides (kiln.quantize's target)
    assert [(r["name"], r["kind"]) for r in report] == [("fc1", kind), ("head_w", kind)]
    x = rng.standard_normal((6, 32)).astype(np.float32)
    assert _cosine(Predictor(str(out))(x), from_onnx(model)(kiln.Tensor(x)).numpy()) > 0.999
    np.save(calib, rng.standard_normal((8, 31)).astype(np.float32))
    assert main(["export", str(path), "--out", str(out), "--int8", "--calibration", str(calib)]) == 2
    assert "does not take a calibration batch" in capsys.readouterr().err
