"""int8 on AVX2 without VNNI: with weights of 7 bits (``weight_bits=7``,
-63..63) ``dense_int8`` and ``conv2d_int8`` run on ``vpmaddubsw`` and
``vpmaddwd`` (read in the code built for ``znver3`` and ``haswell``), exact
(a pair of uint8 x 7-bit products never saturates int16), on any host that
runs AVX2 code; with 8-bit weights they keep the int32 arithmetic."""
import re

import numpy as np
import pytest

import kiln
from kiln.errors import AttrError
from kiln.runtime.device import cpu, host
from kiln.te import get_op
from kiln.te.quantize import pack_int8_weight
from kiln.te.quantize_conv import pack_conv_int8_weight

DENSE = ["uint8", "int8", "float32", "float32"]
CONV = ["float32", "int8", "float32", "float32"]


def _run_or_skip(target):
    if not target.runs_here:
        pytest.skip(f"{host().mcpu} cannot run {target.mcpu} code")


@pytest.mark.parametrize("mcpu", ["znver3", "haswell"])
def test_dense_int8_with_7bit_weights_is_vpmaddubsw_on_avx2_and_exact(mcpu):
    target = cpu(mcpu)
    assert "avx2" in target.isa and "avx512vnni" not in target.isa
    attrs = {"weight_bits": 7}
    kernel = kiln.build("dense_int8", [(12, 64), (3, 16, 16, 4), (48,), (48,)], DENSE, attrs=attrs, target=target)
    code = kernel.assembly()
    assert re.search(r"vpmaddubsw\s+%ymm", code) and re.search(r"vpmaddwd\s+%ymm", code)
    _run_or_skip(target)
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (12, 64)).astype(np.uint8)
    x[0] = 255  # the largest products: 255 x -63 twice in a pair stays within int16
    wq = rng.integers(-63, 64, (64, 48)).astype(np.int8)
    wq[:, 0] = -63
    args = [x, pack_int8_weight(wq, 16), (rng.random(48) * 1e-3).astype(np.float32),
            rng.standard_normal(48).astype(np.float32)]
    want = get_op("dense_int8").reference(*args, **get_op("dense_int8").parse_attrs(attrs))
    np.testing.assert_allclose(kernel(*args), want, rtol=1e-6, atol=1e-4)


def test_conv2d_int8_with_7bit_weights_is_vpmaddubsw_on_avx2_and_exact():
    target = cpu("znver3")
    attrs = {"in_scale": 0.02, "in_zero_point": 100, "padding": (1, 1), "weight_bits": 7}
    shapes = [(2, 16, 6, 6), (2, 3, 3, 4, 16, 4), (32,), (32,)]
    kernel = kiln.build("conv2d_int8", shapes, CONV, attrs=attrs, target=target)
    assert re.search(r"vpmaddubsw\s+%ymm", kernel.assembly())
    _run_or_skip(target)
    rng = np.random.default_rng(1)
    args = [rng.standard_normal(shapes[0]).astype(np.float32) * 3,
            pack_conv_int8_weight(rng.integers(-63, 64, (32, 16, 3, 3)).astype(np.int8), 16),
            (rng.random(32) * 1e-3).astype(np.float32), rng.standard_normal(32).astype(np.float32)]
    want = get_op("conv2d_int8").reference(*args, **get_op("conv2d_int8").parse_attrs(attrs))
    np.testing.assert_allclose(kernel(*args), want, rtol=1e-5, atol=1e-4)


def test_8bit_weights_keep_the_exact_int32_arithmetic_on_avx2():
    kernel = kiln.build("dense_int8", [(6, 64), (2, 16, 16, 4), (32,), (32,)], DENSE, target=cpu("znver3"))
    assert "vpmaddubsw" not in kernel.assembly() and "vpdpbusd" not in kernel.assembly()


def test_weight_bits_other_than_7_or_8_are_refused():
    with pytest.raises(AttrError, match="weight_bits.*expected 7 or 8"):
        get_op("dense_int8").check([(6, 64), (2, 16, 16, 4), (32,), (32,)], DENSE, {"weight_bits": 6})
