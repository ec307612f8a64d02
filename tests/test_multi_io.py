"""Models of several named inputs and outputs of any dtype: token ids (int64)
and an attention mask in, logits and a pooled vector out — exported, run by
a Predictor positionally and by name, replayed, with errors naming the input;
dict outputs; files in the format before it (one input); ``kiln predict
--input NAME=FILE``."""
import json
import re

import numpy as np
import pytest
import tvm

import kiln
import kiln.nn.functional as F
from kiln import nn
from kiln.cli import main
from kiln.errors import DTypeError, ExportError, ShapeError
from kiln.runtime import Predictor
from kiln.runtime.replay import Replay
from helpers import cli_error

VOCAB, DIM, CLASSES, T = 11, 8, 3, 6


class Pool(nn.Module):
    """Embeds token ids (a one-hot product), averages them under the mask,
    classifies the average: ``(logits (N, 3), pooled (N, 8))``."""

    def __init__(self):
        self.table = nn.Parameter(np.random.default_rng(0).standard_normal((VOCAB, DIM)).astype("float32"))
        self.head = nn.Linear(DIM, CLASSES)

    def forward(self, ids, mask):
        embedded = F.one_hot(ids, VOCAB) @ self.table
        weights = mask.reshape((mask.shape[0], mask.shape[1], 1))
        pooled = (embedded * weights).sum(axis=1) / mask.sum(axis=1, keepdims=True)
        return self.head(pooled), pooled


class NamedPool(Pool):
    def forward(self, ids, mask):
        logits, pooled = Pool.forward(self, ids, mask)
        return {"logits": logits, "pooled": pooled}


def tokens(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    mask = (rng.random((n, T)) > 0.3).astype("float32")
    mask[:, 0] = 1
    return rng.integers(0, VOCAB, (n, T)).astype("int64"), mask


def eager(model, ids, mask) -> list[np.ndarray]:
    out = model(kiln.Tensor(ids), kiln.Tensor(mask))
    return [t.numpy() for t in (out.values() if isinstance(out, dict) else out)]


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    """(model in eval mode, its export from a positional example)."""
    nn.init.manual_seed(0)
    model = Pool()
    path = kiln.export(model, tokens(1), tmp_path_factory.mktemp("m") / "pool.so")
    return model.eval(), path


@pytest.fixture(scope="module")
def named(tmp_path_factory):
    """(model in eval mode, its export from a keyword example, keys out of order)."""
    nn.init.manual_seed(0)
    model = NamedPool()
    ids, mask = tokens(1)
    return model.eval(), kiln.export(model, {"mask": mask, "ids": ids}, tmp_path_factory.mktemp("m") / "named.so")


def test_inputs_and_outputs_are_described_by_name_shape_and_dtype(pool, named):
    predictor = Predictor(pool[1])
    assert predictor.meta["format"] == "kiln-model-2"
    assert [tuple(s) for s in predictor.inputs] == [("ids", (None, T), "int64"), ("mask", (None, T), "float32")]
    assert [tuple(s) for s in predictor.outputs] == [("out0", (None, CLASSES), "float32"),
                                                      ("out1", (None, DIM), "float32")]
    assert [i["align"] for i in predictor.meta["inputs"]] == [8, 4]
    keyed = Predictor(named[1])  # the forward's parameter order, whatever the dict's
    assert [s.name for s in keyed.inputs] == ["ids", "mask"]
    assert [s.name for s in keyed.outputs] == ["logits", "pooled"] and keyed.meta["returns"] == "dict"


@pytest.mark.parametrize("n", [1, 5, 40])  # the entries for few, some and many rows
def test_positional_and_keyword_calls_give_the_models_outputs(pool, n):
    model, path = pool
    predictor = Predictor(path)
    ids, mask = tokens(n, seed=n)
    want = eager(model, ids, mask)
    for got in (predictor(ids, mask), predictor(ids=ids, mask=mask), predictor(ids, mask=mask)):
        assert isinstance(got, tuple) and len(got) == 2
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_several_inputs_and_outputs_are_replayed_as_the_vm_computes_them(pool):
    predictor = Predictor(pool[1])
    ids, mask = tokens(4)
    first = predictor(ids, mask)
    assert isinstance(predictor._plans[(ids.shape, mask.shape)], Replay)
    again = predictor(*tokens(4, seed=1))
    vm = predictor._funcs["main_small"](*(tvm.runtime.tensor(a) for a in tokens(4, seed=1)))
    for got, want in zip(again, vm):
        np.testing.assert_array_equal(got, want.numpy())
    assert not any(np.shares_memory(a, b) for a in first for b in again)  # each call's outputs are the caller's


def test_inputs_sharing_memory_run_on_the_vm_until_a_call_can_be_recorded(tmp_path):
    nn.init.manual_seed(0)
    layer = nn.Linear(4, 2)
    predictor = Predictor(kiln.export(lambda a, b: layer(a * b), (np.ones((1, 4), "float32"),) * 2,
                                      tmp_path / "ab.so"))
    assert [s.name for s in predictor.inputs] == ["a", "b"]
    x = np.random.default_rng(0).standard_normal((3, 4)).astype("float32")
    want = layer.eval()(kiln.Tensor(x * x)).numpy()
    np.testing.assert_allclose(predictor(x, x), want, rtol=1e-5, atol=1e-6)
    assert (x.shape, x.shape) not in predictor._plans  # which input a kernel reads would be ambiguous
    y = x + 1
    np.testing.assert_allclose(predictor(x, y), layer(kiln.Tensor(x * y)).numpy(), rtol=1e-5, atol=1e-6)
    assert isinstance(predictor._plans[(x.shape, y.shape)], Replay)
    np.testing.assert_allclose(predictor(x, x), want, rtol=1e-5, atol=1e-6)  # replayed with one array twice


def test_a_dict_forward_returns_a_dict_and_out_takes_one(named):
    model, path = named
    predictor = Predictor(path)
    ids, mask = tokens(3)
    got = predictor(ids=ids, mask=mask)
    assert list(got) == ["logits", "pooled"]
    for g, w in zip(got.values(), eager(model, ids, mask)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    out = {"pooled": np.empty((3, DIM), "float32"), "logits": np.empty((3, CLASSES), "float32")}
    assert predictor(ids, mask, out=out) is out
    np.testing.assert_array_equal(out["logits"], got["logits"])
    for bad, needle in [([out["logits"], out["pooled"]], "a dict of logits, pooled"),
                        ({"logits": out["logits"]}, "a dict of logits, pooled"),
                        ({**out, "pooled": np.empty((3, DIM))}, "float32")]:
        with pytest.raises((ShapeError, DTypeError), match=needle) as info:
            predictor(ids, mask, out=bad)
        assert info.value.arg.startswith("out")


def test_out_for_several_outputs_is_a_tuple_of_arrays(pool):
    predictor = Predictor(pool[1])
    ids, mask = tokens(2)
    want = predictor(ids, mask)
    out = (np.empty((2, CLASSES), "float32"), np.empty((2, DIM), "float32"))
    assert predictor(ids, mask, out=out) is out
    for o, w in zip(out, want):
        np.testing.assert_array_equal(o, w)
    with pytest.raises(ShapeError, match="a tuple of 2 arrays") as info:
        predictor(ids, mask, out=out[0])
    assert info.value.arg == "out"
    with pytest.raises(ShapeError, match=r"shape \(2, 8\)") as info:
        predictor(ids, mask, out=(out[0], np.empty((2, CLASSES), "float32")))
    assert info.value.arg == "out['out1']"


def test_every_input_mistake_names_the_input(pool):
    predictor = Predictor(pool[1])
    ids, mask = tokens(2)
    cases = [(lambda: predictor(ids), ShapeError, "mask", "missing input 'mask'; the model's inputs: ids, mask"),
             (lambda: predictor(ids, mask, mask), ShapeError, "inputs", r"got 3 inputs, expected 2 \(ids, mask\)"),
             (lambda: predictor(ids, mask, attention=mask), ShapeError, "attention", "unknown input 'attention'"),
             (lambda: predictor(ids, ids=ids, mask=mask), ShapeError, "ids", "twice"),
             (lambda: predictor(ids.astype("int32"), mask), DTypeError, "ids", r"ids.astype\('int64'\)"),
             (lambda: predictor(ids, mask.astype("float64")), DTypeError, "mask", "expected float32"),
             (lambda: predictor(ids[:, :4], mask), ShapeError, "ids", r"expected \(N, 6\) with N >= 1"),
             (lambda: predictor(ids, mask[:1]), ShapeError, "mask", "a batch of 1 for 'mask' and 2 for 'ids'")]
    for call, error, arg, needle in cases:
        with pytest.raises(error, match=needle) as info:
            call()
        assert info.value.arg == arg and info.value.where == "Predictor"


def test_export_checks_the_example_and_the_forwards_result(tmp_path):
    nn.init.manual_seed(0)
    model = Pool()
    ids, mask = tokens(2)
    cases = [((ids, mask[:1]), "first dims differ (ids 2, mask 1)"),
             ({"ids": ids, "attention": mask}, "attention, which the forward does not take; its parameters: ids, mask"),
             ({"ids": ids, "not a name": mask}, "identifiers"),
             ((ids, np.float32(1.0)), "input 'mask' is 0-d"),
             ((), "got no inputs")]
    for example, needle in cases:
        with pytest.raises(ExportError, match=re.escape(needle)) as info:
            kiln.export(model, example, tmp_path / "m.so")
        assert info.value.where == "kiln.export" and info.value.arg == "example"
    with pytest.raises(DTypeError, match="input 'mask' is float16") as info:
        kiln.export(model, (ids, mask.astype("float16")), tmp_path / "m.so")
    assert info.value.where == "kiln.export" and info.value.arg == "example"
    with pytest.raises(ExportError, match="must return a tensor") as info:
        kiln.export(lambda ids, mask: (model(ids, mask)[0], 1.0), (ids, mask), tmp_path / "m.so")
    assert info.value.arg == "model"
    assert not (tmp_path / "m.so").exists()


def test_a_dict_example_fills_keyword_only_parameters_and_any_order(tmp_path):
    def forward(a, *, scale):
        return a * scale

    ones = np.ones((1, 3), "float32")
    predictor = Predictor(kiln.export(forward, {"scale": ones * 2, "a": ones}, tmp_path / "kw.so"))
    assert [s.name for s in predictor.inputs] == ["a", "scale"]
    np.testing.assert_array_equal(predictor(np.ones((2, 3), "float32"), scale=np.full((2, 3), 3, "float32")),
                                  np.full((2, 3), 3, "float32"))
    with pytest.raises(ExportError, match="its parameters: none"):
        kiln.export(lambda *xs: xs[0], {"a": ones}, tmp_path / "args.so")


def test_inputs_of_a_forward_without_parameter_names_are_numbered(tmp_path):
    predictor = Predictor(kiln.export(lambda *xs: xs[0] + xs[1], (np.zeros((1, 3), "float32"),) * 2,
                                      tmp_path / "sum.so"))
    assert [s.name for s in predictor.inputs] == ["in0", "in1"]
    np.testing.assert_array_equal(predictor(in1=np.ones((2, 3), "float32"), in0=np.ones((2, 3), "float32")),
                                  np.full((2, 3), 2, "float32"))


def test_a_module_in_the_one_input_format_still_loads_and_runs(tmp_path):
    """Files written before models had several inputs (format kiln-model-1:
    input_shape, input_dtype, input_align) load as one input ``x``."""
    from kiln.graph import optimize, trace
    from kiln.graph.lower import build_module
    from kiln.graph.module import compile_module

    nn.init.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 4)).eval()
    target = kiln.cpu()
    graph = optimize(trace(model, np.zeros((1, 16), "float32")), target)
    meta = {"format": "kiln-model-1", "input_shape": [None, 16], "input_dtype": "float32", "kiln": kiln.__version__,
            "tvm": tvm.__version__, "cpu": target.mcpu, "isa": sorted(target.isa), "input_align": 4}
    compile_module(build_module(graph, meta, target), target).export_library(str(tmp_path / "old.so"))
    predictor = Predictor(tmp_path / "old.so")
    assert [tuple(s) for s in predictor.inputs] == [("x", (None, 16), "float32")]
    assert [tuple(s) for s in predictor.outputs] == [("out", None, None)]  # format 1 did not record it
    x = np.random.default_rng(0).standard_normal((5, 16)).astype("float32")
    for _ in range(2):  # recorded, then replayed
        np.testing.assert_allclose(predictor(x), model(kiln.Tensor(x)).numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(ShapeError, match=r"expected \(N, 16\)") as info:
        predictor(x[:, :8])
    assert info.value.arg == "x"


@pytest.fixture
def token_files(tmp_path):
    ids, mask = tokens(4)
    np.save(tmp_path / "ids.npy", ids)
    np.save(tmp_path / "mask.npy", mask)
    np.savez(tmp_path / "both.npz", ids=ids, mask=mask)
    return tmp_path, ids, mask


def test_predict_takes_each_input_by_name_and_writes_every_output(capsys, pool, named, token_files):
    folder, ids, mask = token_files
    want = Predictor(pool[1])(ids, mask)
    files = ["--input", f"ids={folder / 'ids.npy'}", "--input", f"mask={folder / 'mask.npy'}"]
    assert main(["predict", str(pool[1]), *files, "--out", str(folder / "o.npz"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"path": str(folder / "o.npz"),
                                                   "outputs": {"out0": [4, CLASSES], "out1": [4, DIM]}}
    with np.load(folder / "o.npz") as written:
        assert sorted(written.files) == ["out0", "out1"]
        np.testing.assert_array_equal(written["out0"], want[0])
        np.testing.assert_array_equal(written["out1"], want[1])
    both = f"{folder / 'both.npz'}"  # a .npz gives its array of the input's name
    assert main(["predict", str(named[1]), "--input", f"mask={both}", "--input", f"ids={both}", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)["outputs"]
    assert list(report) == ["logits", "pooled"] and report["logits"]["classes"] == want[0].argmax(axis=1).tolist()
    assert main(["predict", str(pool[1]), *files]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"out0 (4, {CLASSES}):\n  0: class ") and f"out1 (4, {DIM}):" in text


def test_predict_input_mistakes_are_kiln_errors(capsys, pool, token_files):
    folder, _, _ = token_files
    model, ids, mask = str(pool[1]), f"ids={folder / 'ids.npy'}", f"mask={folder / 'mask.npy'}"
    cases = [(["--input", ids], "missing --input mask=FILE; its inputs: ids, mask"),
             (["--input", ids, "--input", mask, "--input", f"tokens={folder / 'ids.npy'}"],
              "the model has no input 'tokens'"),
             (["--input", str(folder / "ids.npy")], "the model takes 2 inputs (ids, mask): give each as --input NAME"),
             (["--input", ids, "--input", str(folder / "mask.npy")], "1 without a name"),
             (["--input", ids, "--input", f"ids={folder / 'mask.npy'}"], "'ids' more than once"),
             (["--input", ids, "--input", mask, "--key", "ids"], "--key picks the array of a single --input FILE"),
             (["--input", ids, "--input", f"mask={folder / 'missing.npy'}"], "cannot read"),
             (["--input", f"ids={folder / 'mask.npy'}", "--input", f"mask={folder / 'ids.npy'}"],
              "argument 'ids': got float32, expected int64"),
             (["--input", ids, "--input", mask, "--out", str(folder)], "is a directory")]
    for argv, needle in cases:
        cli_error(capsys, ["predict", model, *argv], needle)
