"""Knob configs and template dispatch."""
import json

import numpy as np
import pytest
import tvm
from tvm import te

import kiln
from kiln.errors import ScheduleError
from kiln.schedules import Config, apply, config_key
from kiln.schedules.config import Split, clamp_factors
from kiln.runtime.lower import declare
from kiln.schedules.dispatch import _BY_OP, register_template, template_name
from kiln.te import get_op


def test_defaults_are_used_when_no_values_are_given():
    cfg = Config(kiln.cpu())
    assert cfg.is_fallback
    assert cfg.define_split("tile", 100, parts=3, default=(4, 8)) == (4, 8)
    assert cfg.define_knob("unroll", (0, 1), default=1) == 1
    assert cfg.resolved() == {"tile": (4, 8), "unroll": 1}


def test_given_values_override_defaults_and_are_validated():
    cfg = Config(kiln.cpu(), {"tile": [5, 2], "unroll": 0})
    assert cfg.define_split("tile", 100, parts=3, default=(4, 8)) == (5, 2)
    assert cfg.define_knob("unroll", (0, 1), default=1) == 0
    with pytest.raises(ScheduleError, match="more than the extent"):
        Config(kiln.cpu(), {"t": [64, 64]}).define_split("t", 100, parts=3)
    with pytest.raises(ScheduleError, match="expected one of"):
        Config(kiln.cpu(), {"k": 7}).define_knob("k", (0, 1))
    with pytest.raises(ScheduleError, match="positive integer"):
        Config(kiln.cpu(), {"t": [0]}).define_split("t", 10)


def test_unknown_knobs_are_rejected():
    cfg = Config(kiln.cpu(), {"typo": 1})
    cfg.define_knob("unroll", (0, 1))
    with pytest.raises(ScheduleError, match="unknown knob"):
        cfg.check_known()


def test_defaults_shrink_to_small_extents_and_candidates_include_tails():
    assert clamp_factors((8, 16), 20) == (1, 16)
    split = Split(extent=12, parts=2, default=(4,))
    assert {1, 2, 3, 4, 6, 8, 12} <= set(split.candidates())


def test_config_key_is_canonical_json():
    assert config_key({"b": (1, 2), "a": 3}) == config_key({"a": 3, "b": [1, 2]})
    assert json.loads(config_key({"b": (1, 2)})) == {"b": [1, 2]}


def _dispatch(op, target_kind: str) -> str:
    """The name of the template dispatch runs for ``op`` on 4-element inputs."""
    inputs, outs = declare(op.check([(4,)] * op.arity))
    sch = tvm.s_tir.Schedule(te.create_prim_func(inputs + outs))
    return apply(op, target_kind, sch, sch.get_sblock(op.name), Config(kiln.cpu()))


def test_dispatch_prefers_op_then_family_then_fallback():
    add = get_op("add")
    assert _dispatch(add, "cpu") == "generic.schedule_auto"
    marker = register_template("cpu", ops=("add",))(lambda sch, block, cfg: None)
    try:
        assert _dispatch(add, "cpu") == template_name(marker)
    finally:
        del _BY_OP[("add", "cpu")]
    with pytest.raises(ScheduleError, match="no schedule template"):
        _dispatch(add, "no-such-target")


def test_a_config_changes_the_schedule_and_keeps_the_result():
    x = np.random.default_rng(0).random((300, 70)).astype("float32")
    default = kiln.build("exp", [x.shape])
    serial = kiln.build("exp", [x.shape], config={"vector": 1, "parallel": 0})
    assert "T.vectorized" in default.script() and "T.vectorized" not in serial.script()
    np.testing.assert_allclose(serial(x), default(x), rtol=1e-6)


@pytest.mark.parametrize("shape, slice_lanes", [
    ((32, 64, 16, 16), "vector"),  # maps of 256: slices of a whole vector
    ((16, 32, 2, 2), 4),           # maps of 4: slices of 4 lanes
    ((16, 64, 7, 7), None),        # a map of 49 takes no slice of 4 or more: the generic schedule
])
def test_batch_norm_runs_a_task_per_channel_where_a_vector_slice_divides_its_maps(shape, slice_lanes):
    """Every stage of a channel (its statistics, summed in vector slices of
    the contiguous map, then the output) in one task; where no slice
    divides the map, the generic schedule, its statistics vectorized across
    the channels (a slice would span the batch dim and gather)."""
    c = shape[1]
    rng = np.random.default_rng(0)
    x, gamma, beta = (rng.standard_normal(s).astype("float32") for s in (shape, (c,), (c,)))
    gy, gmean, gvar = rng.standard_normal(shape).astype("float32"), *(rng.standard_normal(c).astype("float32")
                                                                        for _ in range(2))
    lanes = kiln.cpu().lanes("float32")
    for op, args in (("batch_norm_train", (x, gamma, beta)), ("batch_norm_train_grad", (gy, x, gamma, gmean, gvar))):
        kernel = kiln.build(op, [a.shape for a in args])
        config = kernel.resolved_config()
        if slice_lanes is None:
            assert kernel.template == "generic.schedule_auto" and config[f"{op}_mean.rfactor"] == 0
        else:
            assert kernel.template == "norm.schedule_batch_norm"
            assert config["vector"] == (lanes if slice_lanes == "vector" else slice_lanes)
            assert "T.parallel" in kernel.script() and len(kernel.script().split("T.parallel")) == 2  # one loop
        want = get_op(op).reference(*args, eps=1e-5)
        for got, ref in zip(kernel(*args), want):
            np.testing.assert_allclose(got.numpy() if hasattr(got, "numpy") else got, ref, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("shape, axis, sliced", [
    ((64, 32, 8, 8), (0, 2, 3), True),    # per channel of NCHW: h and w adjacent, n outside the slice
    ((128, 512), (1,), True),             # row sums
    ((8, 256, 14, 14), (0, 2, 3), True),  # 196 = h x w takes no whole vector: a slice of a quarter of one
    ((1024, 1000), (1,), True),           # rows of 1000: slices of half a vector
    ((64, 512, 7, 7), (0, 2, 3), False),  # 49 takes no slice of 4 or more: it would span n and gather
    ((512, 128), (0,), False),            # column sums: vectors across the outputs read rows whole
])
def test_a_reduction_over_trailing_dims_reads_them_in_vector_slices(shape, axis, sliced):
    """The generic reduction takes a vector slice of the reduction (rfactor)
    by default where the slice reads adjacent elements, cut from the
    innermost reduction loops a vector divides."""
    kernel = kiln.build("sum", [shape], attrs={"axis": axis})
    knob = "sum_acc.rfactor"  # the float64 accumulation's block (te/reduction.py), before its float32 result
    assert kernel.resolved_config()[knob] == int(sliced)
    x = np.random.default_rng(0).standard_normal(shape).astype("float32")
    for config in ({}, {knob: 1}):
        out = kiln.build("sum", [shape], attrs={"axis": axis}, config=config)(x)
        np.testing.assert_allclose(out.numpy() if hasattr(out, "numpy") else out, x.sum(axis=axis),
                                   rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("op, shapes, attrs", [
    ("matmul", [(64, 1), (1, 128)], {}),                    # a batch-1 MLP's weight gradient, x^T @ grad
    ("matmul", [(1, 10), (128, 1)], {"transpose_a": True, "transpose_b": True}),
    ("matmul", [(2, 64, 1), (2, 1, 128)], {}),
    ("dense", [(10, 1), (1, 128), (128,)], {}),
])
def test_a_reduction_of_one_packs_its_rows(op, shapes, attrs):
    """K = 1: the default copies A's block (its rows in tiles) though there
    is no loop over k left to order the copy by, and the result is the
    outer product."""
    kernel = kiln.build(op, shapes, attrs=attrs)
    assert kernel.resolved_config().get("pack_a") == 1  # the case the template once failed to schedule
    arrays = [np.random.default_rng(0).standard_normal(s).astype("float32") for s in shapes]
    np.testing.assert_allclose(np.asarray(kernel(*arrays)), get_op(op).reference(*arrays, **kernel.workload.attrs),
                               rtol=1e-5, atol=1e-6)
