"""Checked op references (te/oprefs.py): a misspelled op name in a gradient
fails when the op modules are loaded, not when a backward pass reaches it."""
import numpy as np
import pytest

import kiln
from kiln.errors import OpNotFoundError
from kiln.te import oprefs
from kiln.te.oprefs import check_op_refs, op_ref

from helpers import Eager


def test_import_checked_every_reference():
    assert oprefs._checked and oprefs._unchecked == []


def test_misspelled_reference_fails_at_the_check(monkeypatch):
    # As while kiln.te is being imported: references wait for the check. The
    # monkeypatch restores the real lists afterwards, so no other test sees this one.
    monkeypatch.setattr(oprefs, "_unchecked", [])
    monkeypatch.setattr(oprefs, "_checked", False)
    op_ref("sign")
    bad = op_ref("sgin")
    assert bad.module == __name__
    with pytest.raises(OpNotFoundError, match=rf"op 'sgin', argument 'op_ref': {__name__} makes op_ref\('sgin'\)") \
            as err:
        check_op_refs()
    assert err.value.op == "sgin"


def test_reference_made_after_import_is_checked_at_once():
    with pytest.raises(OpNotFoundError, match=rf"{__name__} makes op_ref\('softmaxx'\)"):
        op_ref("softmaxx")
    assert oprefs._unchecked == []  # the bad reference was not kept


def test_reference_applies_its_op():
    x = np.array([-2.0, 0.0, 3.0])
    sign = op_ref("sign")
    np.testing.assert_array_equal(sign(kiln.Tensor(x)).numpy(), np.sign(x))
    np.testing.assert_array_equal(sign(Eager(x)).data, np.sign(x))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gradient_arithmetic_keeps_the_value_dtype(dtype):
    # A Python float does not widen (NEP 50): ``1.0 - y * y`` stays in y's dtype,
    # as the scalar ops (rsubtract_scalar, multiply_scalar) compute it.
    y = Eager(np.array([0.5, -0.25], dtype))
    got = 1.0 - y * y
    assert got.op.name == "rsubtract_scalar" and got.dtype == dtype
    np.testing.assert_allclose(got.data, 1.0 - y.data * y.data)
    assert (y * 2.0).op.name == "multiply_scalar" and (y * 2.0).dtype == dtype
