"""Quantized ONNX models in: a QDQ model written by ONNX Runtime's
``quantize_static`` imports with its convolutions and products fused into
kiln's int8 kernels (the others on the dequantized float path, reported),
and computes what ONNX Runtime computes on the same file."""
import numpy as np
import pytest

import kiln
from kiln.runtime import Predictor

onnx = pytest.importorskip("onnx", reason="ONNX models need the onnx package")
ort = pytest.importorskip("onnxruntime", reason="ONNX Runtime writes the QDQ model")
torch = pytest.importorskip("torch", reason="the float model is written in PyTorch")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from kiln.frontend import from_onnx  # noqa: E402
from kiln.frontend.onnx_qdq import NO_VNNI  # noqa: E402
from kiln.runtime.device import cpu  # noqa: E402

#: a CPU with AVX-512 VNNI: where QDQ ops fuse into int8 kernels (which run exact on any host)
VNNI = cpu("znver4")


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.depthwise = torch.nn.Conv2d(32, 32, 3, padding=1, groups=32)
        self.fc = torch.nn.Linear(32 * 4 * 4, 10)

    def forward(self, x):
        h = torch.relu(self.conv2(torch.relu(self.conv1(x))))
        h = torch.relu(self.depthwise(h)) + h
        return self.fc(h.flatten(1))


def _qdq_model(tmp_path, rng, net=None, name: str = "net"):
    """ONNX Runtime's QDQ file of ``net`` (default ``_Net``), calibrated on 4 random batches."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    torch.manual_seed(0)
    net = _Net() if net is None else net
    path, qpath = tmp_path / f"{name}.onnx", tmp_path / f"{name}_qdq.onnx"
    torch.onnx.export(net.eval(), torch.zeros(1, 3, 8, 8), str(path), dynamo=False, input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": {0: "n"}})
    batches = iter([{"x": rng.standard_normal((4, 3, 8, 8)).astype(np.float32)} for _ in range(4)])

    class Reader(CalibrationDataReader):
        def get_next(self):
            return next(batches, None)

    quantize_static(str(path), str(qpath), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    return qpath


def test_an_onnx_runtime_qdq_model_runs_int8_kernels_and_agrees_with_onnx_runtime(tmp_path):
    rng = np.random.default_rng(0)
    qpath = _qdq_model(tmp_path, rng)
    model = from_onnx(qpath, target=VNNI)
    # the depthwise Conv too (depthwise_conv2d_int8)
    assert sorted(op for _, op, _, _ in model.qdq) in (["Conv"] * 3 + ["Gemm"], ["Conv"] * 3 + ["MatMul"])
    assert all(kind == "int8" for _, _, kind, _ in model.qdq), model.qdq
    assert "quantized (QDQ)" in model.summary()
    x = rng.standard_normal((3, 3, 8, 8)).astype(np.float32)
    want = ort.InferenceSession(str(qpath), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = model(kiln.Tensor(x)).numpy()
    assert np.abs(got - want).max() <= 0.02 * np.abs(want).max()  # a rounding apart at most, here and there
    predictor = Predictor(kiln.export(model, x[:1], tmp_path / "qdq.so"))
    np.testing.assert_allclose(predictor(x), got, rtol=1e-4, atol=1e-4)


def test_a_qdq_matmul_with_an_asymmetric_weight_stays_on_the_float_path_and_says_why():
    w = np.arange(-6, 6, dtype=np.int8).reshape(4, 3)
    inits = [numpy_helper.from_array(np.array(0.1, np.float32), "xs"), numpy_helper.from_array(np.array(128, np.uint8), "xz"),
             numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array(0.05, np.float32), "ws"),
             numpy_helper.from_array(np.array(1, np.int8), "wz")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"]),
             helper.make_node("MatMul", ["xd", "wd"], ["y"], name="mm")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model = from_onnx(proto, target=VNNI)
    assert model.qdq == [("mm", "MatMul", "float", "its weight's zero point is not 0 (kiln's int8 weights are "
                                                    "symmetric)")]
    assert from_onnx(proto, target=cpu("znver3")).qdq == [("mm", "MatMul", "float", NO_VNNI)]
    x = np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)
    want = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(model(kiln.Tensor(x)).numpy(), want, rtol=1e-5, atol=1e-5)


class _Residual(torch.nn.Module):
    """A stem and two residual blocks: each sum is read by the next block's
    convolution and by the next block's add, as in ResNet."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.blocks = torch.nn.ModuleList(torch.nn.Sequential(
            torch.nn.Conv2d(16, 16, 1), torch.nn.ReLU(), torch.nn.Conv2d(16, 16, 3, padding=1)) for _ in range(2))
        self.fc = torch.nn.Linear(16 * 8 * 8, 10)

    def forward(self, x):
        h = torch.relu(self.stem(x))
        for block in self.blocks:
            h = torch.relu(block(h) + h)
        return self.fc(h.flatten(1))


def test_a_qdq_residual_sum_is_fake_quantized_once_and_its_blocks_hand_on_codes(tmp_path):
    """``graph.qdq``: the file quantizes each sum twice (for the next block's
    convolution and, as a QuantizeLinear/DequantizeLinear pair, for its add);
    kiln fake-quantizes it once in the producer's write-back, so the adds
    join the convolutions and the blocks pass uint8 codes."""
    import importlib

    from kiln.graph.qdq import share_fake_quant
    from kiln.graph.trace import trace
    export = importlib.import_module("kiln.graph.export")

    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    qpath = _qdq_model(tmp_path, rng, _Residual(), "res")
    model = from_onnx(qpath, target=VNNI)
    x = rng.standard_normal((3, 3, 8, 8)).astype(np.float32)
    assert share_fake_quant(trace(model, x[:1])) == 2  # the stem's output and the first block's sum
    graph = export.optimize(trace(model, x[:1]))
    assert [n.name for n in graph.nodes if n.op.name in ("add", "quantize", "dequantize")] == ["quantize"]  # the fc's
    sums = [n for n in graph.nodes if any(op.name == "dequantize_add" for op, _, _ in n.epilogue)]
    assert sums and all(n.outputs[0].dtype == "uint8" for n in sums[:-1]), graph.nodes
    requantizing = [attrs for n in graph.nodes if n.op.family == "int8" for op, attrs, _ in n.epilogue
                    if op.name == "quantize"]  # by a multiplier, as ONNX Runtime's QLinearConv requantizes
    assert requantizing and all(attrs["reciprocal"] for attrs in requantizing)
    want = ort.InferenceSession(str(qpath), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = Predictor(kiln.export(model, x[:1], tmp_path / "res.so"))(x)
    assert np.abs(got - want).max() <= 0.02 * np.abs(want).max()  # a rounding apart at most, here and there
