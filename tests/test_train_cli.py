"""``kiln train`` / ``export`` / ``predict`` end to end, on digits."""
import json

import numpy as np

from kiln.autotune import Space, extract, records
from kiln.cli import main
from kiln.nn.checkpoint import load_checkpoint
from kiln.runtime import Predictor


def test_train_save_export_predict(tmp_path, capsys, monkeypatch):
    ckpt, so, x = tmp_path / "mlp.npz", tmp_path / "mlp.so", tmp_path / "x.npy"
    assert main(["train", "--epochs", "3", "--json", "--save", str(ckpt), "--export", str(so)]) == 0
    res = json.loads(capsys.readouterr().out)
    assert [e["epoch"] for e in res["epochs"]] == [1, 2, 3]
    assert res["test_error"] < 0.1
    assert res["export"]["matches_model"] is True

    assert main(["export", str(ckpt), "--out", str(tmp_path / "again.so"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["input_shape"] == [None, 64]

    # records of another file (kiln tune --model ... --records FILE) reach the export: the batch size they
    # tuned gets an entry of its own
    monkeypatch.setattr(records, "_applied", [])
    model, _ = load_checkpoint(ckpt)
    first = extract(model, np.zeros((6, 64), "float32"))[0].task
    tuned = tmp_path / "tuned.jsonl"
    records.append(tuned, [records.make_record(first.json, Space(first).default,
                                               result={"median_s": 1e-6, "costs": [1e-6]})])
    assert main(["export", str(ckpt), "--out", str(tmp_path / "tuned.so"), "--records", str(tuned)]) == 0
    capsys.readouterr()
    entries = [e["name"] for e in Predictor(tmp_path / "tuned.so").meta["entries"]]
    assert "main_b6" in entries and "main_b6" not in [e["name"] for e in Predictor(so).meta["entries"]]

    np.save(x, np.random.default_rng(0).random((5, 64)).astype("float32"))
    for model in (so, tmp_path / "again.so"):
        assert main(["predict", str(model), "--input", str(x), "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        assert len(out["classes"]) == 5 and len(out["scores"][0]) == 10


def test_bad_inputs_exit_2_with_a_kiln_error(tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.zeros((2, 3), "float32"))
    assert main(["predict", str(tmp_path / "missing.so"), "--input", str(tmp_path / "x.npy")]) == 2
    assert "kiln: error:" in capsys.readouterr().err
    assert main(["train", "--dataset", "mnist", "--data-dir", str(tmp_path), "--epochs", "1"]) == 2
    assert "kiln: error:" in capsys.readouterr().err
