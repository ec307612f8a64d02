"""The frontends on small models: ONNX files written by onnx.helper and by
torch.onnx.export, PyTorch modules through torch.export; outputs against
ONNX Runtime and PyTorch, the export of an imported model, its parameter
names, and every kind of bad input the issue lists."""
import numpy as np
import pytest

import kiln
from kiln.errors import FrontendError

onnx = pytest.importorskip("onnx", reason="the ONNX frontend's tests need the onnx package")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from kiln.frontend import from_onnx, from_torch  # noqa: E402


def _model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _ort(model, feeds):
    ort = pytest.importorskip("onnxruntime", reason="ONNX Runtime is the reference")
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _close(got, want, tol=1e-5):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= tol * max(np.abs(want).max(), 1.0)


def test_onnx_shape_arithmetic_folds_and_matches_onnx_runtime():
    # y = reshape(x @ W + b, [Shape(x)[0], -1]) then softmax: Shape, Gather, Unsqueeze, Concat folded as it runs
    rng = np.random.default_rng(0)
    w = rng.standard_normal((6, 8)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Add", ["h", "b"], ["hb"]),
             helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "zero1"], ["n1"]),
             helper.make_node("Concat", ["n1", "minus1"], ["shape"], axis=0),
             helper.make_node("Reshape", ["hb", "shape"], ["r"]),
             helper.make_node("Relu", ["r"], ["g"]),
             helper.make_node("Softmax", ["g"], ["y"], axis=-1)]
    inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(np.ones(8, np.float32), "b"),
             numpy_helper.from_array(np.asarray(0, np.int64), "zero"),
             numpy_helper.from_array(np.asarray([0], np.int64), "zero1"),
             numpy_helper.from_array(np.asarray([-1], np.int64), "minus1")]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 6])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 24])], inits)
    imported = from_onnx(model)
    assert [p for p, _ in imported.named_parameters()] == ["W", "b"]
    assert imported.inputs[0].shape == (None, 3, 6)
    x = rng.standard_normal((2, 3, 6)).astype(np.float32)
    _close(imported(x).numpy(), _ort(model, {"x": x})[0])


def test_onnx_exported_cnn_matches_onnx_runtime_eager_and_exported(tmp_path):
    torch = pytest.importorskip("torch", reason="the model is written in PyTorch")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                              torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(4 * 4 * 4, 5)).eval()
    path = tmp_path / "cnn.onnx"
    torch.onnx.export(net, (torch.randn(1, 3, 8, 8),), str(path), dynamo=False, input_names=["image"],
                      output_names=["logits"], dynamic_axes={"image": {0: "N"}})
    imported = from_onnx(path)
    assert {"5.weight", "5.bias"} <= set(imported.state_dict())  # the exporter folded the BatchNorm into conv 0
    x = np.random.default_rng(1).standard_normal((3, 3, 8, 8)).astype(np.float32)
    want = _ort(onnx.load(str(path)), {"image": x})[0]
    _close(imported(x).numpy(), want)
    _close(imported(image=x).numpy(), want)
    so = kiln.export(imported, x[:1], tmp_path / "cnn.so")
    from kiln.runtime import Predictor
    predictor = Predictor(so)
    assert [s.name for s in predictor.inputs] == ["image"]
    _close(predictor(x), want)


def test_torch_module_imports_with_state_dict_names_and_a_dynamic_batch():
    torch = pytest.importorskip("torch", reason="the module is written in PyTorch")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU6(),
                              torch.nn.AvgPool2d(2), torch.nn.Conv2d(8, 8, 3), torch.nn.AdaptiveAvgPool2d(1),
                              torch.nn.Flatten(), torch.nn.Linear(8, 4))
    net.train()
    imported = from_torch(net, (torch.randn(2, 3, 12, 12),))
    assert net.training, "from_torch restores the module's mode"
    assert [n for n, _ in imported.named_parameters()] == [n for n, _ in net.named_parameters()]
    assert {"1.running_mean", "1.running_var"} <= {n for n, _ in imported.named_buffers()}
    assert imported.inputs[0].shape[0] is None
    x = torch.randn(5, 3, 12, 12)
    _close(imported(x.numpy()).numpy(), net.eval()(x).detach().numpy())


def test_a_torch_linear_reads_its_weight_in_place_and_trains_as_pytorch_does():
    torch = pytest.importorskip("torch", reason="the module is written in PyTorch")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.GELU(), torch.nn.Linear(16, 3))
    x = torch.randn(4, 6)
    imported = from_torch(net, (x,))
    kinds = [step.kind for step in imported._steps]
    assert "t.default" not in kinds and kinds.count("addmm.default") == 2  # t(W) joined into each addmm
    optimizer = kiln.optim.SGD(imported.parameters(), lr=0.1)
    reference = torch.optim.SGD(net.parameters(), lr=0.1)
    for _ in range(3):  # eager kiln steps against PyTorch's: the weights' gradients in their own layout
        optimizer.zero_grad()
        loss = (imported(x.numpy()) ** 2).mean()
        loss.backward()
        optimizer.step()
        reference.zero_grad()
        want = (net(x) ** 2).mean()
        want.backward()
        reference.step()
        _close(loss.numpy(), want.detach().numpy())
    _close(imported.params["0.weight"].numpy(), net[0].weight.detach().numpy())


# -- bad input -------------------------------------------------------------------------------------------
def test_unsupported_ops_are_listed_all_at_once_before_anything_runs():
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("NonMaxSuppression", ["a"], ["b"], name="nms1"),
             helper.make_node("NonMaxSuppression", ["b"], ["c"]), helper.make_node("Det", ["c"], ["y"], name="det")]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])])
    with pytest.raises(FrontendError) as e:
        from_onnx(model)
    text = str(e.value)
    assert "2 unsupported op type(s)" in text and "NonMaxSuppression x2 (first: 'nms1')" in text
    assert "Det x1 (first: 'det')" in text


def test_opset_outside_the_range_is_refused():
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [helper.make_tensor_value_info("x", 1, [2])],
                   [helper.make_tensor_value_info("y", 1, [2])], opset=5)
    with pytest.raises(FrontendError, match="opset 5 is outside the supported range"):
        from_onnx(model)


def test_files_that_are_not_models_and_missing_external_data(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a protobuf at all \x00\xff")
    with pytest.raises(FrontendError, match="is not an ONNX model"):
        from_onnx(bad)
    with pytest.raises(FrontendError, match="no such file"):
        from_onnx(tmp_path / "missing.onnx")
    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "W")
    model = _model([helper.make_node("MatMul", ["x", "W"], ["y"])], [helper.make_tensor_value_info("x", 1, [1, 4])],
                   [helper.make_tensor_value_info("y", 1, [1, 4])], [w])
    onnx.save_model(model, str(tmp_path / "ext.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="weights.bin", size_threshold=0)
    (tmp_path / "weights.bin").unlink()
    with pytest.raises(FrontendError, match="missing external-data file"):
        from_onnx(tmp_path / "ext.onnx")


def test_unsupported_dtype_and_wrong_inputs_are_named():
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [helper.make_tensor_value_info("x", TensorProto.FLOAT16,
                                                                                             [2])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [2])])
    with pytest.raises(FrontendError, match="float16 is not supported"):
        from_onnx(model)
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [helper.make_tensor_value_info("x", 1, ["N", 3])],
                   [helper.make_tensor_value_info("y", 1, ["N", 3])])
    imported = from_onnx(model)
    with pytest.raises(FrontendError, match="argument 'x': got int64, expected float32"):
        imported(np.zeros((2, 3), np.int64))
    with pytest.raises(FrontendError, match=r"got shape \(2, 4\), expected \[\?x3\]"):
        imported(np.zeros((2, 4), np.float32))
    with pytest.raises(FrontendError, match="missing input"):
        imported()
    with pytest.raises(FrontendError, match="no input named 'y'"):
        from_onnx(model, input_shapes={"y": (1, 3)})


def test_torch_frontend_refuses_non_modules_and_lists_unsupported_ops():
    torch = pytest.importorskip("torch", reason="the module is written in PyTorch")
    with pytest.raises(FrontendError, match="expected a torch.nn.Module"):
        from_torch(lambda x: x, (torch.randn(2),))

    class Fft(torch.nn.Module):
        def forward(self, x):
            return torch.fft.fft(x).real + torch.linalg.det(x)[..., None, None]

    with pytest.raises(FrontendError, match=r"unsupported op\(s\)"):
        from_torch(Fft(), (torch.randn(2, 3, 3),))
