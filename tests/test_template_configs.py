"""Every CPU template, at random valid configs from its knob space, still
matches numpy on odd shapes (the tuner will search the same spaces)."""
import numpy as np
import pytest

import kiln
from kiln.autotune import Space, Task
from kiln.te import get_op

from devices import cpu_level  # noqa: F401 - a fixture
from helpers import Case, as_list, assert_close, random_inputs

WORKLOADS = [
    Case("matmul", [(37, 29), (29, 45)]), Case("matmul", [(3, 17, 9), (9, 70)]),
    Case("matmul", [(29, 37), (45, 29)], attrs={"transpose_a": True, "transpose_b": True}),
    Case("dense", [(13, 33), (33, 20), (20,)], attrs={"relu": True}),
    Case("add", [(33, 17), (17,)]), Case("exp", [(1000, 3)]),
    Case("sum", [(13, 70)], attrs={"axis": 1}), Case("max", [(70, 13)], attrs={"axis": 0}), Case("sum", [(999,)]),
    Case("softmax", [(7, 50)]), Case("log_softmax", [(5, 64)]),
    Case("conv2d", [(1, 3, 9, 11), (5, 3, 3, 3)], attrs={"padding": 1}),
    Case("conv2d", [(2, 9, 7, 3), (3, 3, 3, 6)], attrs={"layout": "NHWC", "stride": 2}),
    Case("conv2d_backward_weight", [(2, 12, 7, 7), (2, 16, 7, 7)], attrs={"kernel": 3, "padding": 1}),
    Case("conv2d_backward_weight", [(3, 5, 9, 9), (3, 8, 5, 5)], attrs={"kernel": 3, "padding": 1, "stride": 2}),
    Case("conv2d_backward_weight", [(2, 3, 32, 32), (2, 12, 16, 16)], attrs={"kernel": 5, "padding": 2, "stride": 2}),
    Case("conv2d_backward_data", [(2, 32, 6, 6), (32, 64, 3, 3)], attrs={"in_size": 12, "padding": 1, "stride": 2}),
    # grouped (conv2d_grouped.py, conv2d_grouped_weight.py): odd maps, a stride, a channel multiplier of 2
    Case("conv2d", [(2, 6, 9, 11), (12, 2, 3, 3)], attrs={"groups": 3, "padding": 1, "stride": 2}),
    Case("conv2d", [(1, 16, 14, 14), (32, 1, 3, 3)], attrs={"groups": 16, "padding": 1}),
    Case("conv2d_backward_data", [(2, 8, 7, 9), (8, 2, 3, 3)], attrs={"in_size": (7, 9), "padding": 1, "groups": 4}),
    Case("conv2d_backward_data", [(2, 8, 4, 6), (8, 2, 3, 3)], attrs={"in_size": (8, 12), "padding": 1, "stride": 2,
                                                                      "groups": 4}),
    Case("conv2d_backward_weight", [(2, 8, 9, 9), (2, 8, 5, 5)], attrs={"kernel": 3, "padding": 1, "stride": 2,
                                                                      "groups": 4}),
    Case("conv2d_backward_weight", [(2, 16, 14, 14), (2, 16, 14, 14)], attrs={"kernel": 3, "padding": 1, "groups": 16}),
    Case("conv2d_winograd", [(2, 2, 7, 9, 8), (2, 4, 4, 13, 16)],
         attrs={"out_channels": 24, "padding": 1, "in_block": 8, "out_block": True}),
    # F(4x4): its transforms scale by up to 8; inputs of [-1/4, 1/4] keep float32's rounding within atol
    Case("conv2d_winograd", [(2, 2, 9, 7, 8), (2, 6, 6, 13, 16)],
         attrs={"out_channels": 24, "padding": 1, "in_block": 8, "out_block": True}, low=-0.25, high=0.25),
    Case("batch_norm_train", [(6, 5, 4, 8), (5,), (5,)], attrs={"eps": 1e-5}),
    Case("batch_norm_train", [(6, 8, 4, 8), (8,), (8,)], attrs={"eps": 1e-5}),  # channel tasks (norm.py)
    Case("batch_norm_train_grad", [(6, 8, 2, 6), (6, 8, 2, 6), (8,), (8,), (8,)], attrs={"eps": 1e-5}),
    Case("batch_norm_train_grad", [(6, 5, 4, 8), (6, 5, 4, 8), (5,), (5,), (5,)], attrs={"eps": 1e-5}),
]


@pytest.mark.parametrize("case", WORKLOADS, ids=str)
@pytest.mark.parametrize("seed", [0, 1])
def test_random_configs_match_numpy(case, seed, cpu_level):
    """Two configs per vector width (``cpu_level``), different at each."""
    rng = np.random.default_rng([seed, cpu_level.vector_bits])
    dtypes = case.dtype_list()
    config = Space(Task.create(case.op, case.shapes, dtypes, case.attrs)).sample(rng)
    kernel = kiln.build(case.op, case.shapes, dtypes, case.attrs, config=config)
    arrays = random_inputs(case, rng)
    op = get_op(case.op)
    got, want = as_list(kernel(*arrays)), as_list(op.reference(*arrays, **op.parse_attrs(case.attrs)))
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):  # each output of a multi-output op (the BatchNorm ones)
        assert_close(g, w, "float32", f"{case} output {k} with {config}")


def test_strided_data_gradient_tasks_take_whole_phase_cycles():
    """A strided conv2d_backward_data at batch 2 with several channel blocks:
    one output row per task read another block's sub-kernel on the map's last
    row (the index TVM flattened for its phase), so a task's rows are whole
    cycles of the phases, and every such choice matches numpy."""
    case = Case("conv2d_backward_data", [(2, 32, 6, 6), (32, 64, 3, 3)],
                attrs={"in_size": 12, "padding": 1, "stride": 2})
    space = Space(Task.create(case.op, case.shapes, case.dtype_list(), case.attrs))
    rows = space.choices("task_rows")
    assert rows == [2, 4, 6, 12]
    arrays = random_inputs(case, np.random.default_rng(0))
    op = get_op(case.op)
    want = op.reference(*arrays, **op.parse_attrs(case.attrs))
    for r in rows:
        got = kiln.build(case.op, case.shapes, attrs=case.attrs, config={"task_rows": r, "tile_oc": 16})(*arrays)
        assert_close(got, want, "float32", f"task_rows={r}")


@pytest.mark.parametrize("shapes, attrs", [
    ([(2, 8, 5, 5), (8, 6, 5, 5)], {"in_size": 15, "stride": 3, "padding": 2}),   # 5x5 taps in 3 phases
    ([(1, 16, 6, 6), (16, 24, 3, 3)], {"in_size": 12, "stride": 2, "padding": 1}),
    ([(1, 16, 6, 6), (16, 24, 3, 3)], {"in_size": 11, "stride": 2, "padding": 1}),  # odd height: no whole cycles
])
def test_unrolled_row_phases_match_numpy(shapes, attrs):
    """``unroll_phase`` (a strided data gradient's row phases and kernel rows
    unrolled, so a row's missing taps are not multiplied) gives the same
    result as the rolled loop, and stride 1 has no such knob."""
    case = Case("conv2d_backward_data", shapes, attrs=attrs)
    space = Space(Task.create(case.op, case.shapes, case.dtype_list(), case.attrs))
    assert space.choices("unroll_phase") == [0, 1]
    arrays = random_inputs(case, np.random.default_rng(0))
    op = get_op(case.op)
    want = op.reference(*arrays, **op.parse_attrs(case.attrs))
    for unroll in (0, 1):
        for rows in space.choices("task_rows"):
            config = {"unroll_phase": unroll, "task_rows": rows}
            got = kiln.build(case.op, case.shapes, attrs=case.attrs, config=config)(*arrays)
            assert_close(got, want, "float32", str(config))
    unstrided = Space(Task.create(case.op, [(1, 16, 11, 11), (16, 24, 3, 3)], case.dtype_list(),
                                  {"in_size": 11, "padding": 1}))
    assert "unroll_phase" not in unstrided.knobs
