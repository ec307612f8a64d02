"""int8 inference: ``dense_int8`` runs on ``vpdpbusd`` where the target has
AVX-512 VNNI (read in the generated code, built for such a CPU whatever the
host), serves a symbolic batch, and ``kiln.quantize`` turns a model's dense
layers into int8 with a per-layer report, exports, and refuses bad
calibration data clearly."""
import json
import re

import numpy as np
import pytest

import kiln
from kiln import nn
from kiln.errors import AttrError, DataError
from kiln.nn.observers import entropy_threshold
from kiln.runtime import Predictor
from kiln.runtime.device import cpu, host
from kiln.te import get_op, sym
from kiln.te.quantize import pack_int8_weight

DTYPES = ["uint8", "int8", "float32", "float32"]
#: a CPU with AVX-512 VNNI: what kiln.quantize decides for (the kernels run on the host, exact either way)
VNNI = cpu("znver4")


def _inputs(rng, m, k, n, bn=16):
    x = rng.integers(0, 256, (m, k)).astype(np.uint8)
    w = pack_int8_weight(rng.integers(-128, 128, (k, n)).astype(np.int8), bn)  # -128: the widest products
    return [x, w, (rng.random(n) * 1e-3).astype(np.float32), rng.standard_normal(n).astype(np.float32)]


@pytest.mark.parametrize("mcpu", ["cascadelake", "znver4", "sapphirerapids"])
def test_dense_int8_is_vpdpbusd_on_a_vnni_cpu(mcpu):
    target = cpu(mcpu)
    assert "avx512vnni" in target.isa
    kernel = kiln.build("dense_int8", [(64, 512), (16, 128, 16, 4), (256,), (256,)], DTYPES, target=target)
    assert kernel.template == "int8.schedule_dense_int8"
    assert re.search(r"vpdpbusd\s+%zmm", kernel.assembly())  # the instruction, on 512-bit registers


def test_dense_int8_without_vnni_is_exact_too():
    target = cpu("znver3")  # AVX2, no VNNI
    kernel = kiln.build("dense_int8", [(6, 64), (2, 16, 16, 4), (32,), (32,)], DTYPES, target=target)
    assert "vpdpbusd" not in kernel.assembly()
    if not target.runs_here:
        pytest.skip(f"{host().mcpu} cannot run {target.mcpu} code")
    args = _inputs(np.random.default_rng(0), 6, 64, 32)
    want = get_op("dense_int8").reference(*args, **get_op("dense_int8").parse_attrs({}))
    np.testing.assert_allclose(kernel(*args), want, rtol=1e-6, atol=1e-4)


def test_dense_int8_serves_a_symbolic_batch():
    kernel = kiln.build("dense_int8", [(sym("n"), 128), (4, 32, 16, 4), (64,), (64,)], DTYPES)
    assert kernel.template == "int8.schedule_dense_int8"
    rng = np.random.default_rng(1)
    for m in (1, 5, 8, 13, 64):
        args = _inputs(rng, m, 128, 64)
        want = get_op("dense_int8").reference(*args, **get_op("dense_int8").parse_attrs({}))
        np.testing.assert_allclose(kernel(*args), want, rtol=1e-6, atol=1e-4, err_msg=f"{m} rows")


def _mlp():
    nn.init.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)).eval()


@pytest.mark.parametrize("observer", ["minmax", "percentile", "entropy"])
def test_quantize_reports_each_layer_and_stays_close_to_float(observer):
    model, rng = _mlp(), np.random.default_rng(0)
    calibration = [rng.standard_normal((32, 64)).astype(np.float32) for _ in range(4)]
    quantized = kiln.quantize(model, calibration, observer=observer, target=VNNI)
    assert [(r.name, r.kind) for r in quantized.report] == [("0", "int8"), ("2", "int8")]
    first = quantized.report[0]
    assert 0 < first.in_scale and 0 <= first.in_zero_point <= 255 and first.error < 0.02
    x = rng.standard_normal((16, 64)).astype(np.float32)
    want, got = model(kiln.Tensor(x)).numpy(), quantized(kiln.Tensor(x)).numpy()
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 0.03
    assert "int8" in quantized.summary()
    assert isinstance(model.modules[0], nn.Linear)  # the model itself is untouched


def test_the_entropy_threshold_is_not_pulled_down_by_exact_zeros():
    # A ReLU's output: the zeros are exact at any threshold, so adding more
    # of them must not move it (they once filled the first bin and halved it).
    rng = np.random.default_rng(0)
    tail = np.abs(rng.standard_normal(50_000)) ** 2
    alone = entropy_threshold(tail, 256)
    assert entropy_threshold(np.concatenate([np.zeros(150_000), tail]), 256) == alone
    assert alone > np.percentile(tail, 99)  # clips only the rare largest values
    assert entropy_threshold(np.zeros(10), 256) == 0.0


def test_a_quantized_model_exports_and_skipped_layers_stay_float(tmp_path):
    model, rng = _mlp(), np.random.default_rng(2)
    calibration = rng.standard_normal((64, 64)).astype(np.float32)
    quantized = kiln.quantize(model, calibration, skip=("last",), per_channel=False, target=VNNI)
    assert [(r.name, r.kind) for r in quantized.report] == [("0", "int8"), ("2", "float")]
    predictor = Predictor(kiln.export(quantized, calibration[:1], tmp_path / "q.so"))
    x = rng.standard_normal((7, 64)).astype(np.float32)
    np.testing.assert_allclose(predictor(x), quantized(kiln.Tensor(x)).numpy(), rtol=1e-5, atol=1e-5)


class _NoDense(nn.Module):
    def forward(self, x):
        return x * 2.0


def test_without_an_8bit_dot_product_every_layer_stays_float_and_says_why():
    model = _mlp()
    with pytest.warns(RuntimeWarning, match="no 8-bit dot-product"):
        quantized = kiln.quantize(model, np.ones((8, 64), np.float32), target=cpu("sandybridge"))  # AVX, no AVX2
    assert all(r.kind == "float" and "VNNI" in r.why for r in quantized.report)


def test_on_avx2_layers_quantize_with_7bit_weights():
    model, rng = _mlp(), np.random.default_rng(2)
    x = rng.standard_normal((64, 64)).astype(np.float32)
    quantized = kiln.quantize(model, x, target=cpu("znver3"))
    assert all(r.kind == "int8" and "7-bit" in r.why for r in quantized.report)
    assert all(r.error < 0.05 for r in quantized.report)
    got, want = quantized(kiln.Tensor(x)).numpy(), model(kiln.Tensor(x)).numpy()
    assert got.ravel() @ want.ravel() / np.linalg.norm(got) / np.linalg.norm(want) > 0.995


def test_bad_calibration_and_models_are_refused_clearly():
    model, x = _mlp(), np.zeros((4, 64), np.float32)
    bad = x.copy()
    bad[0, 0] = np.nan
    for calibration, needle in [([], "no calibration batch"), (np.zeros((0, 64), np.float32), "empty"),
                                (bad, "NaN"), (np.zeros((4, 63), np.float32), "does not take a calibration batch")]:
        with pytest.raises(DataError, match=needle):
            kiln.quantize(model, calibration)
    with pytest.raises(AttrError, match="no dense layer"):
        kiln.quantize(_NoDense(), x)
    with pytest.raises(AttrError, match="expected one of minmax"):
        kiln.quantize(model, x, observer="mse")
    with pytest.raises(AttrError, match="expected layer names among 0, 2"):
        kiln.quantize(model, x, skip=("head",))


def test_kiln_export_int8_of_a_trained_mlp_keeps_its_test_error(tmp_path, capsys):
    from kiln.cli import main
    from kiln.nn.data import digits

    ckpt, float_so, int8_so, calib = (tmp_path / n for n in ("mlp.npz", "f.so", "q.so", "calib.npy"))
    assert main(["train", "--epochs", "3", "--json", "--save", str(ckpt), "--export", str(float_so)]) == 0
    capsys.readouterr()
    train_x, _ = digits("train").arrays
    np.save(calib, train_x[:256].astype(np.float32))
    assert main(["export", str(ckpt), "--out", str(int8_so), "--int8", "--calibration", str(calib), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)["int8"]
    kind = "int8" if "avx512vnni" in host().isa else "float"  # the host decides (kiln.quantize's target)
    assert [r["kind"] for r in report] == [kind] * len(report)
    assert all(r["error"] < 0.05 for r in report if r["kind"] == "int8")
    test_x, test_y = digits("test").arrays
    errors = [float(np.mean(Predictor(so)(test_x.astype(np.float32)).argmax(1) != test_y)) for so in (float_so, int8_so)]
    assert abs(errors[1] - errors[0]) <= 0.005, errors  # within half a point of the float model's test error
    for argv, needle in [(["--int8"], "needs --calibration"), (["--calibration", str(calib)], "applies with --int8"),
                         (["--int8", "--calibration", str(tmp_path / "none.npy")], "cannot read"),
                         (["--int8", "--calibration", str(calib), "--observer", "mse"], "expected one of minmax")]:
        assert main(["export", str(ckpt), "--out", str(tmp_path / "x.so"), *argv]) == 2
        assert needle in capsys.readouterr().err


def test_a_quantized_transformer_exports_with_its_rows_symbolic(tmp_path):
    from kiln.nn.language_model import TransformerLM

    nn.init.manual_seed(0)
    model = TransformerLM(30, d_model=32, nhead=2, num_layers=1, max_len=16, dropout=0.0).eval()
    tokens = np.random.default_rng(3).integers(0, 30, (4, 16)).astype(np.int32)
    quantized = kiln.quantize(model, tokens, target=VNNI)
    assert {r.kind for r in quantized.report} == {"int8"}  # out_proj, the feed-forward layers, the head
    predictor = Predictor(kiln.export(quantized, tokens[:1], tmp_path / "lm.so"))
    want = quantized(kiln.Tensor(tokens[:3])).numpy()
    np.testing.assert_allclose(predictor(tokens[:3]), want, rtol=1e-4, atol=1e-4)
    floats = model(kiln.Tensor(tokens[:3])).numpy().ravel()
    assert want.ravel() @ floats / np.linalg.norm(want) / np.linalg.norm(floats) > 0.99
