"""The models the frontends must bring in, at CI size (the full sizes run in
the models benchmark): ResNet-50's and MobileNetV2's architectures, BERT
and GPT-2 from Hugging Face configs, each imported from PyTorch (against
PyTorch eager) and from its ONNX file (against ONNX Runtime), the error
relative to the output's largest value at most 1e-4; one export of each
frontend's transformer with a dynamic batch; and an imported BERT
fine-tuned by ``kiln.compile`` against the same steps in PyTorch."""
import warnings

import numpy as np
import pytest

import kiln

torch = pytest.importorskip("torch", reason="the reference models are written in PyTorch")
pytest.importorskip("onnx", reason="the ONNX frontend reads files with the onnx package")
ort = pytest.importorskip("onnxruntime", reason="ONNX Runtime is the reference for the ONNX files")

from kiln.bench import torch_models  # noqa: E402
from kiln.frontend import from_onnx, from_torch  # noqa: E402

TOL = 1e-4


def _relative(got, want):
    want = np.asarray(want)
    return float(np.abs(np.asarray(got) - want).max() / max(np.abs(want).max(), 1e-12))


def _onnx_file(model, args, names, path, dynamic):
    torch.onnx.export(model, args, str(path), dynamo=False, input_names=names, output_names=["out"],
                      dynamic_axes={n: dict(dynamic) for n in names})
    return path


def _ort_run(path, feeds):
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def _cnn(name):
    if name == "resnet50":
        return torch_models.resnet(layers=(1, 1, 1, 1), width=8, classes=10)
    return torch_models.mobilenet_v2(width=0.25, classes=10, settings=[(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 1, 2)])


def _transformer(name):
    if name == "bert":
        return torch_models.HiddenStates(torch_models.bert(hidden=64, layers=2, heads=2, intermediate=128,
                                                           vocab=500))
    return torch_models.HiddenStates(torch_models.gpt2(hidden=64, layers=2, heads=2, vocab=500))


def _tokens(batch=2, seq=12):
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 500, (batch, seq), generator=gen)
    mask = torch.ones(batch, seq, dtype=torch.long)
    mask[-1, seq - 3:] = 0  # padding in the last row
    return ids, mask


@pytest.mark.parametrize("name", ["mobilenet_v2"])  # a ResNet from both frontends: tutorials/09_import_a_model.py
def test_cnn_imports_from_both_frontends(name, tmp_path):
    model = _cnn(name)
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    want = model(x).detach().numpy()
    imported = from_torch(model, (x,))
    assert _relative(imported(x.numpy()).numpy(), want) <= TOL
    path = _onnx_file(model, (x,), ["image"], tmp_path / f"{name}.onnx", {0: "N"})
    from_file = from_onnx(path)
    assert _relative(from_file(x.numpy()).numpy(), _ort_run(path, {"image": x.numpy()})) <= TOL


@pytest.mark.parametrize("name", ["bert", "gpt2"])
def test_transformer_imports_from_both_frontends(name, tmp_path):
    model = _transformer(name)
    ids, mask = _tokens()
    want = model(ids, mask).detach().numpy()
    imported = from_torch(model, (ids, mask))
    assert [s.name for s in imported.inputs] == ["input_ids", "attention_mask"]
    assert _relative(imported(ids.numpy(), mask.numpy()).numpy(), want) <= TOL
    path = _onnx_file(model, (ids, mask), ["input_ids", "attention_mask"], tmp_path / f"{name}.onnx",
                      {0: "batch", 1: "sequence"})
    from_file = from_onnx(path)
    assert from_file.inputs[0].shape == (None, None)  # dim_params: symbolic
    feeds = {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}
    assert _relative(from_file(**feeds).numpy(), _ort_run(path, feeds)) <= TOL
    longer = _tokens(batch=3, seq=20)  # another batch and sequence length, same imported model
    feeds = {"input_ids": longer[0].numpy(), "attention_mask": longer[1].numpy()}
    assert _relative(from_file(**feeds).numpy(), _ort_run(path, feeds)) <= TOL


def test_imported_transformer_exports_with_a_dynamic_batch(tmp_path):
    model = _transformer("gpt2")
    ids, mask = _tokens()
    imported = from_torch(model, (ids, mask))
    path = kiln.export(imported, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}, tmp_path / "gpt2.so")
    from kiln.runtime import Predictor
    predictor = Predictor(path)
    ids3, mask3 = _tokens(batch=3)
    got = predictor(input_ids=ids3.numpy(), attention_mask=mask3.numpy())
    assert _relative(got, model(ids3, mask3).detach().numpy()) <= TOL


def test_imported_bert_fine_tunes_with_kiln_compile_as_pytorch_does():
    model = _transformer("bert")
    ids, mask = _tokens()
    target = torch.randn(2, 12, 64, generator=torch.Generator().manual_seed(2))
    imported = from_torch(model, (ids, mask))
    names = [n for n, _ in imported.named_parameters()]
    assert names == [n for n, _ in model.named_parameters()]

    optimizer = kiln.optim.SGD(imported.parameters(), lr=0.05)
    kiln_target = kiln.Tensor(target.numpy())
    step = kiln.compile(lambda i, m: ((imported(i, m) - kiln_target) ** 2).mean(), optimizer)
    with warnings.catch_warnings():
        warnings.simplefilter("error", kiln.nn.compiled.CompileWarning)  # compiled, not run eagerly
        kiln_losses = [float(step(ids.numpy(), mask.numpy()).numpy()) for _ in range(20)]

    reference = torch.optim.SGD(model.parameters(), lr=0.05)
    torch_losses = []
    for _ in range(20):  # eval mode: the imported graph has no dropout
        reference.zero_grad()
        loss = ((model(ids, mask) - target) ** 2).mean()
        loss.backward()
        reference.step()
        torch_losses.append(float(loss))
    assert torch_losses[-1] < torch_losses[0]
    np.testing.assert_allclose(kiln_losses, torch_losses, rtol=1e-4, atol=1e-6)
