"""``lstm_cell_grad``'s template (schedules/cpu/lstm.py): a row's dC once,
then its four gate blocks and its dc; numpy's numbers, NaN and inf included."""
import numpy as np
import pytest

import kiln
from kiln.te import get_op

LANES = kiln.cpu().lanes("float32")


@pytest.mark.parametrize("rows, hidden", [(3, 2 * LANES), (32, 16 * LANES)])
def test_the_row_template_gives_the_references_gradients(rows, hidden):
    shapes = [(rows, 4 * hidden)] + [(rows, hidden)] * 3
    kernel = kiln.build("lstm_cell_grad", shapes)
    assert kernel.template == "lstm.schedule_lstm_cell_grad"
    rng = np.random.default_rng(0)
    xs = [(rng.standard_normal(s) * 4).astype("float32") for s in shapes]
    xs[0][0, :3] = [np.nan, np.inf, -np.inf]  # a gate of each kind of non-finite value
    xs[1][1, 0] = np.nan
    want = get_op("lstm_cell_grad").reference(*xs)
    for got, ref in zip(kernel(*xs), want):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5, equal_nan=True)


def test_a_state_of_one_vector_keeps_the_generic_template():
    shapes = [(2, 4 * LANES)] + [(2, LANES)] * 3
    kernel = kiln.build("lstm_cell_grad", shapes)
    assert kernel.template == "generic.schedule_auto"
    xs = [np.random.default_rng(1).standard_normal(s).astype("float32") for s in shapes]
    for got, ref in zip(kernel(*xs), get_op("lstm_cell_grad").reference(*xs)):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)
