"""State dicts (PyTorch's naming contract), checkpoints without pickle, and
``kiln export``'s errors for every kind of bad checkpoint file."""
import json

import numpy as np
import pytest

import kiln
from kiln import nn
from kiln.errors import AttrError, CheckpointError, ShapeError
from kiln.nn.checkpoint import load_checkpoint, read_checkpoint, save_checkpoint
from kiln.nn.train import build_model
from kiln.runtime import Predictor
from helpers import run_cli


class Net(nn.Module):
    """A model written in Python: layers in a list, a dict and a tuple, a BatchNorm, a tied weight."""

    def __init__(self):
        self.layers = [nn.Linear(64, 32), nn.ReLU()]
        self.heads = {"main": nn.Linear(32, 10)}
        self.pair = (nn.Identity(), nn.BatchNorm1d(32))
        self.tied = self.layers[0].weight

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.heads["main"](self.pair[1](x))




def test_names_follow_the_attribute_path_as_in_pytorch():
    cnn = build_model("cnn", (1, 8, 8), 10)
    assert list(cnn.state_dict()) == [
        "0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean", "1.running_var", "3.weight", "3.bias",
        "4.weight", "4.bias", "4.running_mean", "4.running_var", "7.weight", "7.bias"]
    assert [n for n, _ in build_model("mlp-residual", (64,), 10).named_parameters()] == [
        "1.weight", "1.bias", "3.fn.0.weight", "3.fn.0.bias", "4.weight", "4.bias"]
    net = Net()
    names = [n for n, _ in net.named_parameters()]
    assert names == ["layers.0.weight", "layers.0.bias", "heads.main.weight", "heads.main.bias",
                     "pair.1.weight", "pair.1.bias"]  # the tied weight once, under its first name
    assert net.parameters() == [p for _, p in net.named_parameters()]
    assert [n for n, _ in net.named_buffers()] == ["pair.1.running_mean", "pair.1.running_var"]
    state = net.state_dict()
    assert "tied" in state and np.array_equal(state["tied"], state["layers.0.weight"])  # state_dict keeps both
    state["layers.0.bias"][:] = 99  # a copy: the model is untouched
    assert not np.any(net.layers[0].bias.numpy() == 99)


def test_load_state_dict_is_strict_all_or_nothing_and_lists_every_problem():
    nn.init.manual_seed(0)
    source, target = Net(), Net()
    before = target.state_dict()
    bad = source.state_dict()
    del bad["pair.1.running_var"]
    bad["extra.weight"] = np.zeros(3, "float32")
    bad["heads.main.bias"] = np.zeros(11, "float32")
    with pytest.raises(AttrError) as err:
        target.load_state_dict(bad)
    msg = str(err.value)
    assert "missing keys: pair.1.running_var" in msg and "unexpected keys: extra.weight" in msg
    assert "heads.main.bias (got (11,), expected (10,))" in msg
    for name, value in target.state_dict().items():  # nothing was loaded
        np.testing.assert_array_equal(value, before[name])

    shapes_only = source.state_dict()
    shapes_only["layers.0.weight"] = shapes_only["layers.0.weight"].T
    with pytest.raises(ShapeError, match=r"layers.0.weight \(got \(32, 64\), expected \(64, 32\)\)"):
        target.load_state_dict(shapes_only)
    with pytest.raises(AttrError, match="not numeric"):
        target.load_state_dict({**source.state_dict(), "tied": np.array(["a"] * 64 * 32).reshape(64, 32)})
    with pytest.raises(AttrError, match="expected a mapping"):
        target.load_state_dict([1, 2])

    loose = {k: v.astype("float64") for k, v in source.state_dict().items() if k != "pair.1.running_mean"}
    loose["extra"] = np.zeros(2)
    assert target.load_state_dict(loose, strict=False) == (["pair.1.running_mean"], ["extra"])
    assert target.layers[0].weight.dtype == "float32"  # cast to the parameter's dtype
    np.testing.assert_array_equal(target.heads["main"].weight.numpy(), source.heads["main"].weight.numpy())
    target.load_state_dict({k: kiln.Tensor(v) for k, v in source.state_dict().items()})  # Tensors work too
    for name, value in source.state_dict().items():
        np.testing.assert_array_equal(target.state_dict()[name], value)


def test_checkpoint_round_trip_is_atomic_and_pickle_free(tmp_path):
    nn.init.manual_seed(1)
    net = Net()
    path = save_checkpoint(net, tmp_path / "net.npz", {"note": "python model"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["net.npz", "net.npz.json"]  # no temporary left
    meta = json.loads((tmp_path / "net.npz.json").read_text())
    assert meta["format"] == "kiln-checkpoint-2" and meta["spec"] == {"note": "python model"}
    with np.load(path, allow_pickle=False) as data:
        assert sorted(data.files) == sorted(net.state_dict())
    state, spec = read_checkpoint(path)
    assert spec == {"note": "python model"}
    for name, value in net.state_dict().items():
        np.testing.assert_array_equal(state[name], value)
    fresh = Net()
    model, _ = load_checkpoint(path, fresh)
    assert model is fresh and not fresh.training
    np.testing.assert_array_equal(fresh.pair[1].running_var.numpy(), net.pair[1].running_var.numpy())

    save_checkpoint(build_model("mlp", (64,), 10), path)  # same name, another model: the pair stays consistent
    with pytest.raises(CheckpointError, match="net.npz holds weights that do not fit the model given, a Net: "):
        load_checkpoint(path, Net())


def test_a_misfit_names_the_checkpoints_model_and_the_model_given(tmp_path):
    path = save_checkpoint(build_model("cnn", (1, 8, 8), 10), tmp_path / "cnn.npz",
                           {"model": "cnn", "in_shape": [1, 8, 8], "classes": 10})
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path, build_model("mlp", (64,), 10))
    assert str(info.value).startswith(f"{path} holds weights saved from model 'cnn'; they do not fit the model "
                                      "given, a Sequential(Flatten, Linear, ReLU, Linear): "), info.value


def test_first_format_checkpoints_p0_to_pn_still_load(tmp_path):
    nn.init.manual_seed(2)
    cnn = build_model("cnn", (1, 8, 8), 10)
    params = {f"p{i}": p.numpy() for i, p in enumerate(cnn.parameters())}
    buffers = {f"b{i}": b.numpy() + i for i, (_, b) in enumerate(cnn.named_buffers())}
    np.savez(tmp_path / "old.npz", **params, **buffers)
    (tmp_path / "old.npz.json").write_text(json.dumps({"model": "cnn", "in_shape": [1, 8, 8], "classes": 10}))
    model, spec = load_checkpoint(tmp_path / "old.npz")
    assert spec["model"] == "cnn"
    np.testing.assert_array_equal(model.state_dict()["3.weight"], cnn.state_dict()["3.weight"])
    np.testing.assert_array_equal(model.state_dict()["4.running_var"], buffers["b3"])


def test_a_python_model_exports_after_load_state_dict(tmp_path, capsys):
    nn.init.manual_seed(3)
    trained = Net()
    trained.eval()
    ckpt = save_checkpoint(trained, tmp_path / "net.npz")
    code, _, err = run_cli(["export", str(ckpt), "--out", str(tmp_path / "net.so")], capsys)
    assert code == 2 and "cannot rebuild" in err and "load_state_dict" in err and "kiln.export" in err

    nn.init.manual_seed(4)
    model = Net()
    model.load_state_dict(read_checkpoint(ckpt)[0])
    x = np.random.default_rng(0).random((5, 64)).astype("float32")
    so = kiln.export(model, x[:1], tmp_path / "net.so")
    np.testing.assert_allclose(Predictor(so)(x), trained(kiln.Tensor(x)).numpy(), rtol=1e-5, atol=1e-5)


def _valid_checkpoint(folder):
    nn.init.manual_seed(0)
    return save_checkpoint(build_model("mlp", (64,), 10), folder / "mlp.npz",
                           {"model": "mlp", "in_shape": [64], "classes": 10})


def _break(kind, ckpt):
    """Damage a valid checkpoint in one way; return the path to give kiln export."""
    meta = ckpt.with_name(ckpt.name + ".json")
    if kind == "missing":
        return ckpt.with_name("nope.npz")
    if kind == "directory":
        ckpt.with_name("dir.npz").mkdir()
        return ckpt.with_name("dir.npz")
    if kind == "truncated":
        ckpt.write_bytes(ckpt.read_bytes()[:300])
    elif kind == "corrupt":
        data = bytearray(ckpt.read_bytes())
        data[200:260] = bytes(60)
        ckpt.write_bytes(bytes(data))
    elif kind == "empty":
        ckpt.write_bytes(b"")
    elif kind == "npy":
        np.save(ckpt.with_name("x.npy"), np.zeros(3))
        ckpt.write_bytes(ckpt.with_name("x.npy").read_bytes())
    elif kind == "pickled":
        with open(ckpt, "wb") as f:
            np.savez(f, **{"1.weight": np.array([{}], dtype=object)})
    elif kind == "foreign":  # another save's arrays beside this spec
        np.savez(ckpt.with_name("other.npz"), a=np.zeros(3))
        ckpt.write_bytes(ckpt.with_name("other.npz").read_bytes())
    elif kind == "no json":
        meta.unlink()
    elif kind == "bad json":
        meta.write_text(meta.read_text()[:-5])
    elif kind == "json list":
        meta.write_text("[1, 2]")
    elif kind == "no model":
        m = json.loads(meta.read_text())
        del m["spec"]["model"]
        meta.write_text(json.dumps(m))
    elif kind == "bad in_shape":
        m = json.loads(meta.read_text())
        m["spec"]["in_shape"] = [0, "x"]
        meta.write_text(json.dumps(m))
    elif kind == "wrong model":
        save_checkpoint(Net(), ckpt, {"model": "mlp", "in_shape": [64], "classes": 10})
    return ckpt


@pytest.mark.parametrize("kind,needle", [
    ("missing", "nope.npz: no such file"), ("directory", "is a directory"),
    ("truncated", "not a readable .npz"), ("corrupt", "mlp.npz"), ("empty", "not a readable .npz"),
    ("npy", "single .npy array"), ("pickled", "not a readable .npz"), ("foreign", "is not the file"),
    ("no json", "mlp.npz.json is missing"), ("bad json", "not valid JSON"), ("json list", "expected an object"),
    ("no model", "cannot rebuild"), ("bad in_shape", "'in_shape'"),
    ("wrong model", "holds weights saved from model 'mlp'; they do not fit model 'mlp' as kiln builds it, a "
                    "Sequential(Flatten, Linear, ReLU, Linear)"),
])
def test_export_names_what_is_wrong_with_which_file(tmp_path, capsys, kind, needle):
    path = _break(kind, _valid_checkpoint(tmp_path))
    code, out, err = run_cli(["export", str(path), "--out", str(tmp_path / "m.so")], capsys)
    assert code == 2 and err.startswith("kiln: error:") and needle in err, err
    assert "Traceback" not in err and out == ""
    assert not (tmp_path / "m.so").exists()


def test_export_refuses_an_unwritable_out_before_compiling(tmp_path, capsys):
    ckpt = _valid_checkpoint(tmp_path)
    (tmp_path / "out").mkdir()
    code, _, err = run_cli(["export", str(ckpt), "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and "is a directory" in err and "--out" in err
    (tmp_path / "file").write_text("")
    code, _, err = run_cli(["export", str(ckpt), "--out", str(tmp_path / "file" / "m.so")], capsys)
    assert code == 2 and "is a file, not a folder" in err
    with pytest.raises(kiln.errors.OutputError, match="is a directory"):
        kiln.export(build_model("mlp", (64,), 10), np.zeros((1, 64), "float32"), tmp_path / "out")


def test_export_refuses_a_bad_records_file_before_compiling(tmp_path, capsys):
    ckpt = _valid_checkpoint(tmp_path)
    (tmp_path / "notes.txt").write_text("not\na records file\n")
    for records, needle in ((tmp_path / "none.jsonl", "does not exist"), (tmp_path / "notes.txt", "no valid tuning record")):
        code, out, err = run_cli(["export", str(ckpt), "--out", str(tmp_path / "m.so"), "--records", str(records)],
                                 capsys)
        assert code == 2 and err.startswith("kiln: error:") and needle in err and out == "", err
        assert not (tmp_path / "m.so").exists()
