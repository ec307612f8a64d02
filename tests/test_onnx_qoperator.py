"""Quantized ONNX models in the QOperator form (frontend/onnx_qoperator.py,
frontend/onnx_contrib.py): ONNX Runtime's ``quantize_static`` of a small CNN
with ``QuantFormat.QOperator`` (``QLinearConv``, ``QGemm``) imports, runs as
int8 kernels where the target has an 8-bit dot product and on the float path
elsewhere, each reported, and gives ONNX Runtime's output either way; its
export computes the same. (ONNX's own node tests of ``QLinearConv``,
``QLinearMatMul``, ``MatMulInteger``, ``ConvInteger`` and
``DynamicQuantizeLinear`` run in test_onnx_node_cases.py.)"""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="QOperator models are ONNX files")
ort = pytest.importorskip("onnxruntime", reason="ONNX Runtime writes the QOperator model and is the oracle")
torch = pytest.importorskip("torch", reason="the float model is written by torch.onnx.export")

import kiln  # noqa: E402
from kiln.errors import FrontendError  # noqa: E402
from kiln.frontend import from_onnx  # noqa: E402
from kiln.runtime import Predictor  # noqa: E402
from kiln.runtime.device import cpu  # noqa: E402

VNNI, AVX2 = cpu("znver4"), cpu("znver3")


class _Net(torch.nn.Module):
    """Convolutions (one depthwise), a residual add, a global average pool and a linear head:
    ``QLinearConv``, ``QLinearAdd``, ``QLinearGlobalAveragePool`` and ``QGemm``."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.b = torch.nn.Conv2d(16, 16, 3, padding=1)
        self.depthwise = torch.nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x):
        h = torch.relu(self.a(x))
        h = torch.relu(self.b(h) + h)
        h = torch.relu(self.depthwise(h))
        return self.fc(torch.nn.functional.adaptive_avg_pool2d(h, 1).flatten(1))


@pytest.fixture(scope="module")
def qoperator(tmp_path_factory):
    """(path of the QOperator model, an input, ONNX Runtime's output on it)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    folder = tmp_path_factory.mktemp("qop")
    torch.manual_seed(0)
    torch.onnx.export(_Net().eval(), (torch.randn(4, 3, 8, 8),), str(folder / "f.onnx"), input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": {0: "n"}}, dynamo=False)
    rng = np.random.default_rng(0)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.items = iter([{"x": rng.standard_normal((4, 3, 8, 8)).astype(np.float32)} for _ in range(3)])

        def get_next(self):
            return next(self.items, None)

    quantize_static(str(folder / "f.onnx"), str(folder / "q.onnx"), Reader(), quant_format=QuantFormat.QOperator,
                    per_channel=True, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    ops = {n.op_type for n in __import__("onnx").load(str(folder / "q.onnx")).graph.node}
    assert {"QLinearConv", "QLinearAdd", "QLinearGlobalAveragePool", "QGemm"} <= ops, ops
    x = rng.standard_normal((5, 3, 8, 8)).astype(np.float32)
    session = ort.InferenceSession(str(folder / "q.onnx"), providers=["CPUExecutionProvider"])
    return folder / "q.onnx", x, session.run(None, {"x": x})[0]


@pytest.mark.parametrize("target, kind", [(VNNI, "int8"), (AVX2, "float")])
def test_a_qoperator_model_imports_and_gives_onnx_runtimes_output(qoperator, target, kind):
    path, x, want = qoperator
    model = from_onnx(path, target=target)
    assert [(op, k) for _, op, k, _ in model.qdq] == [("QLinearConv", kind)] * 3 + [("QGemm", kind)]
    assert kind == "int8" or all("no AVX-512 VNNI" in why for *_, why in model.qdq)
    # ONNX Runtime's integer arithmetic and kiln's give the same codes here; a code apart at most on any input
    step = np.abs(want).max() / 64
    assert np.abs(model(x).numpy() - want).max() <= step


def test_a_qoperator_model_exports(qoperator, tmp_path):
    path, x, want = qoperator
    model = from_onnx(path, target=VNNI)
    predictor = Predictor(kiln.export(model, x[:1], tmp_path / "q.so"))
    np.testing.assert_allclose(predictor(x), model(x).numpy(), atol=1e-6)


def test_a_qlinear_op_with_computed_scales_refuses_to_export(tmp_path):
    from onnx import TensorProto, helper
    # the scale of a QLinearMatMul's input comes from the data: eager reads it, an export cannot
    nodes = [helper.make_node("QuantizeLinear", ["x", "qs", "z"], ["a"]),
             helper.make_node("ReduceMax", ["s_in"], ["s"], keepdims=0),
             helper.make_node("QLinearMatMul", ["a", "s", "z", "b", "bs", "z", "ys", "z"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4]),
                     helper.make_tensor_value_info("s_in", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, [2, 3])],
        [helper.make_tensor("z", TensorProto.UINT8, [], [0]), helper.make_tensor("qs", TensorProto.FLOAT, [], [1.0]),
         helper.make_tensor("bs", TensorProto.FLOAT, [], [0.5]), helper.make_tensor("ys", TensorProto.FLOAT, [], [2.0]),
         helper.make_tensor("b", TensorProto.UINT8, [4, 3], list(range(12)))])
    model = from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    want = np.clip(np.rint(((x.astype(np.float64) * 0.25) @ (np.arange(12).reshape(4, 3) * 0.5)) / 2.0), 0, 255)
    np.testing.assert_array_equal(model(x, np.array([0.1, 0.25, 0.2], np.float32)).numpy(), want)
    with pytest.raises(FrontendError, match="computed from the data"):
        kiln.export(model, (x, np.ones(3, np.float32)), tmp_path / "m.so", dynamic_batch=False)


def test_a_qlinear_conv_that_spells_out_auto_pad_notset_runs_in_int8(qoperator, tmp_path):
    """ONNX Runtime's pre-processing (``quant_pre_process``) writes every
    convolution's ``auto_pad`` out, a string the file stores as bytes."""
    path, x, want = qoperator
    proto = onnx.load(str(path))
    for node in proto.graph.node:
        if node.op_type == "QLinearConv":
            node.attribute.append(onnx.helper.make_attribute("auto_pad", "NOTSET"))
    model = from_onnx(proto, target=VNNI)
    assert [k for _, op, k, _ in model.qdq if op == "QLinearConv"] == ["int8"] * 3
    np.testing.assert_allclose(model(x).numpy(), from_onnx(path, target=VNNI)(x).numpy(), atol=1e-6)
