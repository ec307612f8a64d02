"""``transpose`` in tiles (schedules/cpu/transpose.py): where it applies,
that it gives numpy's result, and that the tiles are what it says."""
import numpy as np
import pytest

import kiln
from kiln.te import sym

LANES = kiln.cpu().lanes("float32")


@pytest.mark.parametrize("shape, axes, dtype", [
    ((4 * LANES, 2 * LANES), (1, 0), "float32"),
    ((2, LANES, 3, 2 * LANES), (0, 2, 3, 1), "float32"),   # NCHW -> NHWC
    ((2, 3, LANES, LANES), (0, 3, 1, 2), "float32"),       # NHWC -> NCHW
    ((LANES, 2, 2 * LANES), (2, 1, 0), "int64"),
    ((2 * LANES, 2 * LANES), None, "float64"),
])
def test_a_transpose_that_moves_the_inner_axis_runs_in_tiles(shape, axes, dtype):
    kernel = kiln.build("transpose", [shape], dtypes=[dtype], attrs={"axes": axes})
    assert kernel.template == "transpose.schedule_transpose"
    assert {"tile", "parallel"} <= set(kernel.resolved_config())
    script = kernel.script()
    assert "T.vectorized" in script and "T.unroll" in script, script
    x = (np.random.default_rng(0).standard_normal(shape) * 100).astype(dtype)
    np.testing.assert_array_equal(kernel(x), np.transpose(x, axes))
    lanes, out = kiln.cpu().lanes(dtype), np.transpose(x, axes).shape
    perm = list(axes) if axes is not None else list(reversed(range(len(shape))))
    across = perm.index(len(shape) - 1)  # the output axis that walks the input's rows
    for tile in (t for t in (lanes // 2, 2 * lanes) if t > 1 and out[across] % t == 0):
        tiled = kiln.build("transpose", [shape], dtypes=[dtype], attrs={"axes": axes}, config={"tile": tile})
        np.testing.assert_array_equal(tiled(x), np.transpose(x, axes))


@pytest.mark.parametrize("shape, axes", [
    ((4, LANES, 2 * LANES), (1, 0, 2)),  # the inner axis stays: rows are copied whole
    ((3, 5), (1, 0)),                    # not whole vectors
    ((sym("n"), LANES), (1, 0)),         # a symbolic dim
])
def test_other_transposes_keep_the_generic_template(shape, axes):
    kernel = kiln.build("transpose", [shape], attrs={"axes": axes})
    assert kernel.template == "generic.schedule_auto"
    concrete = tuple(d if isinstance(d, int) else 3 for d in shape)
    x = np.random.default_rng(0).standard_normal(concrete).astype("float32")
    np.testing.assert_array_equal(kernel(x), np.transpose(x, axes))
