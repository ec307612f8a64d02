"""int8 convolutions: ``conv2d_int8`` runs on ``vpdpbusd`` where the target
has AVX-512 VNNI (read in the generated code, built for such a CPU whatever
the host), serves a symbolic batch, and ``kiln.quantize`` turns a CNN's
convolutions into it (and a depthwise one into ``depthwise_conv2d_int8``):
reported, exported, close to the float model."""
import re

import numpy as np
import pytest

import kiln
from kiln import nn
from kiln.graph import optimize, trace
from kiln.runtime import Predictor
from kiln.runtime.device import cpu
from kiln.te import get_op, sym
from kiln.te.quantize_conv import pack_conv_int8_weight
from kiln.te.quantize_depthwise import pack_depthwise_int8_weight

DTYPES = ["float32", "int8", "float32", "float32"]
ATTRS = {"in_scale": 0.05, "in_zero_point": 120, "padding": (1, 1)}
#: a CPU with AVX-512 VNNI: what kiln.quantize decides for (the kernels run on the host, exact either way)
VNNI = cpu("znver4")


def _args(rng, n, c, hw, k):
    w = pack_conv_int8_weight(rng.integers(-127, 128, (k, c, 3, 3)).astype(np.int8), 16)
    return [rng.standard_normal((n, c, hw, hw)).astype(np.float32), w, (rng.random(k) * 1e-3).astype(np.float32),
            rng.standard_normal(k).astype(np.float32)]


@pytest.mark.parametrize("mcpu", ["cascadelake", "znver4"])
def test_conv2d_int8_is_vpdpbusd_on_a_vnni_cpu(mcpu):
    shapes = [(1, 64, 14, 14), (4, 3, 3, 16, 16, 4), (64,), (64,)]
    kernel = kiln.build("conv2d_int8", shapes, DTYPES, attrs=ATTRS, target=cpu(mcpu))
    assert kernel.template == "int8_conv.schedule_conv2d_int8"
    assert re.search(r"vpdpbusd\s+%zmm", kernel.assembly())


def test_conv2d_int8_serves_a_symbolic_batch():
    kernel = kiln.build("conv2d_int8", [(sym("n"), 8, 6, 6), (1, 3, 3, 2, 16, 4), (16,), (16,)], DTYPES,
                        attrs=ATTRS)
    rng = np.random.default_rng(0)
    for n in (1, 3):
        args = _args(rng, n, 8, 6, 16)
        want = get_op("conv2d_int8").reference(*args, **get_op("conv2d_int8").parse_attrs(ATTRS))
        np.testing.assert_allclose(kernel(*args), want, rtol=1e-5, atol=1e-3, err_msg=f"batch {n}")


def test_depthwise_conv2d_int8_serves_a_symbolic_batch():
    attrs = {"channels": 20, "in_scale": 0.05, "in_zero_point": 3, "padding": (1, 1), "stride": (2, 2)}
    kernel = kiln.build("depthwise_conv2d_int8", [(sym("n"), 20, 7, 7), (2, 1, 3, 3, 16), (20,), (20,)], DTYPES,
                        attrs=attrs)
    rng, op = np.random.default_rng(4), get_op("depthwise_conv2d_int8")
    w = pack_depthwise_int8_weight(rng.integers(-127, 128, (20, 1, 3, 3)).astype(np.int8), 16)
    for n in (1, 3):
        args = [rng.standard_normal((n, 20, 7, 7)).astype(np.float32), w, (rng.random(20) * 1e-3).astype(np.float32),
                rng.standard_normal(20).astype(np.float32)]
        np.testing.assert_allclose(kernel(*args), op.reference(*args, **op.parse_attrs(attrs)), rtol=1e-5, atol=1e-3,
                                   err_msg=f"batch {n}")


@pytest.mark.parametrize("c, hw, k, rows_first", [(16, 14, 16, 1), (64, 4, 128, 0)])
def test_conv2d_int8_tasks_split_rows_unless_the_weight_is_larger_than_an_image(c, hw, k, rows_first):
    """As the float convolution's: the threads split an image's rows where the weight is the smaller (each
    core reads the rows the layer before wrote), else its channel blocks (each reads half the weight);
    either order computes the same."""
    shapes = [(2, c, hw, hw), (k // 16, 3, 3, c // 4, 16, 4), (k,), (k,)]
    kernel = kiln.build("conv2d_int8", shapes, DTYPES, attrs=ATTRS)
    assert kernel.resolved_config()["rows_first"] == rows_first
    other = kiln.build("conv2d_int8", shapes, DTYPES, attrs=ATTRS,
                       config={**kernel.config, "rows_first": 1 - rows_first})
    args = _args(np.random.default_rng(1), 2, c, hw, k)
    np.testing.assert_array_equal(kernel(*args), other(*args))


class _CNN(nn.Module):
    def __init__(self):
        self.stem = nn.Conv(3, 16, 3)
        self.body = nn.Conv(16, 32, 3, stride=2)
        self.head = nn.Linear(32 * 4 * 4, 10)

    def forward(self, x):
        h = self.body(self.stem(x).relu()).relu()
        return self.head(h.reshape((h.shape[0], 32 * 4 * 4)))


def test_a_cnns_convolutions_quantize_export_and_stay_close_to_float(tmp_path):
    nn.init.manual_seed(0)
    model, rng = _CNN().eval(), np.random.default_rng(1)
    calibration = [rng.standard_normal((8, 3, 8, 8)).astype(np.float32) for _ in range(2)]
    quantized = kiln.quantize(model, calibration, target=VNNI)
    assert [(r.name, r.kind) for r in quantized.report] == [("stem", "int8"), ("body", "int8"), ("head", "int8")]
    assert all(r.error < 0.03 for r in quantized.report)
    x = rng.standard_normal((5, 3, 8, 8)).astype(np.float32)
    eager, floats = quantized(kiln.Tensor(x)).numpy(), model(kiln.Tensor(x)).numpy()
    assert eager.ravel() @ floats.ravel() / np.linalg.norm(eager) / np.linalg.norm(floats) > 0.995
    predictor = Predictor(kiln.export(quantized, calibration[0][:1], tmp_path / "cnn.so"))
    np.testing.assert_allclose(predictor(x), eager, rtol=1e-4, atol=1e-4)
    # exported, the stem hands the body its output in channel blocks (graph.layout)
    stem, body = (n for n in optimize(trace(quantized, x[:1]), kiln.cpu()).nodes if n.op.name == "conv2d_int8")
    assert (stem.attrs["in_block"], stem.attrs["out_block"]) == (0, True)
    assert (body.attrs["in_block"], body.attrs["out_block"]) == (16, False)


class _InvertedResidual(nn.Module):
    """MobileNetV2's block: 1x1 expansion, ReLU6, 3x3 depthwise, ReLU6, 1x1 projection, the shortcut added."""

    def __init__(self, c: int, expand: int):
        self.expand, self.project = nn.Conv(c, c * expand, 1), nn.Conv(c * expand, c, 1)
        self.depthwise = nn.Conv(c * expand, c * expand, 3, groups=c * expand)

    def forward(self, x):
        h = nn.functional.relu6(self.expand(x))
        return self.project(nn.functional.relu6(self.depthwise(h))) + x


@pytest.mark.parametrize("target", [VNNI, cpu("znver3")], ids=["vnni", "avx2"])
def test_an_inverted_residual_blocks_depthwise_convolution_runs_in_int8_between_codes(tmp_path, target):
    nn.init.manual_seed(2)
    model, rng = nn.Sequential(nn.Conv(3, 8, 3), _InvertedResidual(8, 6)).eval(), np.random.default_rng(3)
    calibration = [rng.standard_normal((4, 3, 10, 10)).astype(np.float32) for _ in range(2)]
    quantized = kiln.quantize(model, calibration, target=target)
    assert {r.name: r.kind for r in quantized.report} == {"0": "int8", "1.expand": "int8", "1.depthwise": "int8",
                                                          "1.project": "int8"}
    assert all(r.error < 0.03 for r in quantized.report)
    # the depthwise weight keeps 8 bits on AVX2 too (its taps are not summed in pairs of bytes); the others take 7
    assert [r.name for r in quantized.report if r.why] == ([] if target is VNNI else ["0", "1.expand", "1.project"])
    x = rng.standard_normal((3, 3, 10, 10)).astype(np.float32)
    eager, floats = quantized(kiln.Tensor(x)).numpy(), model(kiln.Tensor(x)).numpy()
    assert eager.ravel() @ floats.ravel() / np.linalg.norm(eager) / np.linalg.norm(floats) > 0.995
    # exported, the expansion hands the depthwise layer uint8 codes in its channel blocks, read in place, and
    # it hands the projection codes in turn (graph.layout, graph.requantize)
    graph = optimize(trace(quantized, x[:1]), kiln.cpu())
    dw = next(n for n in graph.nodes if n.op.name == "depthwise_conv2d_int8")
    expand = next(n for n in graph.nodes if n.outputs[0] is dw.inputs[0])
    assert expand.op.name == "conv2d_int8" and dw.inputs[0].dtype == "uint8" and dw.outputs[0].dtype == "uint8"
    assert dw.attrs["in_block"] == dw.inputs[1].shape[4] and dw.attrs["out_block"]
    predictor = Predictor(kiln.export(quantized, x[:1], tmp_path / "block.so"))
    got = predictor(x)
    # the codes the stem hands on are those the expansion computed itself; the shortcut adds them back, with
    # their rounding and their clamp to the calibrated range (as in graph.requantize's tests)
    assert got.ravel() @ eager.ravel() / np.linalg.norm(got) / np.linalg.norm(eager) > 0.999


def test_a_grouped_convolution_stays_float_and_the_report_says_why():
    nn.init.manual_seed(2)
    model = nn.Sequential(nn.Conv(8, 8, 3, groups=2), nn.ReLU(), nn.Conv(8, 16, 1)).eval()
    x = np.random.default_rng(3).standard_normal((2, 8, 6, 6)).astype(np.float32)
    quantized = kiln.quantize(model, x, target=VNNI)
    assert [(r.name, r.kind) for r in quantized.report] == [("2", "int8"), ("0", "float")]
    assert "more than one channel per group" in quantized.report[1].why
    want, got = model(kiln.Tensor(x)).numpy(), quantized(kiln.Tensor(x)).numpy()
    assert got.ravel() @ want.ravel() / np.linalg.norm(got) / np.linalg.norm(want) > 0.995


def test_a_batchnorm_after_an_int8_conv_folds_into_its_scale_and_offset(tmp_path):
    """kiln.quantize leaves an eval BatchNorm (and an imported model's bias add) after
    the conv2d_int8; the export folds it into the op's per-channel scale and offset."""
    nn.init.manual_seed(5)
    model = nn.Sequential(nn.Conv(3, 16, 3, bias=False), nn.BatchNorm2d(16), nn.ReLU(), nn.Conv(16, 8, 1))
    rng = np.random.default_rng(6)
    x = rng.standard_normal((8, 3, 6, 6)).astype(np.float32)
    model.train()
    model(kiln.Tensor(x))  # BatchNorm statistics away from (0, 1)
    model.eval()
    quantized = kiln.quantize(model, x, target=VNNI)
    graph = optimize(trace(quantized, x[:1]), kiln.cpu())
    first = next(n for n in graph.nodes if n.op.name == "conv2d_int8")
    # nothing of the BatchNorm is left to compute: the relu is the op's own, the codes its readers'
    assert first.attrs["relu"] and [op.name for op, _, _ in first.epilogue] in ([], ["quantize"])
    predictor = Predictor(kiln.export(quantized, x[:1], tmp_path / "bn.so"))
    # exporting leaves the quantized model in eval mode, as it found it (its BatchNorm ran on batch statistics)
    assert not quantized.training and not any(m.training for m in quantized.module.modules)
    eager = quantized(kiln.Tensor(x)).numpy()
    # the folded affine rounds differently from the chain it replaces: a code may move by one step
    assert np.max(np.abs(predictor(x) - eager)) <= 0.01 * np.max(np.abs(eager))
