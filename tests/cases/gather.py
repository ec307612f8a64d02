"""Gathers by integer indices (take, gather_elements) and their scatter-add gradients."""
from helpers import Case, random_array


def _indexed(n: int, out_of_range: bool = False):
    """A ``make``: float (or int) data, then indices into an axis of ``n``:
    negative ones, a position given twice (once as its negative alias, so the
    gradient adds two contributions there) and, with ``out_of_range``, some
    beyond either end (clamped)."""

    def make(rng, shapes, dtypes):
        data = random_array(rng, shapes[0], dtypes[0])
        reach = n + 3 if out_of_range else n
        idx = rng.integers(-reach, reach, size=shapes[1]).astype(dtypes[1])
        if idx.size > 1:
            idx.flat[0] = rng.integers(0, n)
            idx.flat[1] = idx.flat[0] - n
        return [data, idx]
    return make


F32_I64, F64_I32, F32_I32 = ["float32", "int64"], ["float64", "int32"], ["float32", "int32"]

CASES = [
    Case("take", [(5, 4), (3, 2)], F32_I64, make=_indexed(5), grad_inputs=(0,)),
    Case("take", [(3, 6, 4), (7,)], F64_I32, attrs={"axis": 1}, make=_indexed(6), grad_inputs=(0,)),
    Case("take", [(4, 5), (2, 3)], F32_I32, attrs={"axis": -1}, make=_indexed(5), grad_inputs=(0,)),
    Case("take", [(6, 3), (10,)], F64_I32, make=_indexed(6, out_of_range=True), grad_inputs=(0,)),
    Case("take", [(4, 3), ()], F32_I64, attrs={"axis": -1}, make=_indexed(3), grad_inputs=(0,)),
    # an embedding lookup: a table's rows by a batch of token ids
    Case("take", [(50, 32), (4, 8)], F32_I64, make=_indexed(50), grad=False),
    Case("take", [(7,), (4,)], ["int32", "int64"], make=_indexed(7), grad=False),
    Case("take_grad", [(3, 2, 4), (3, 2)], F32_I64, attrs={"shape": (5, 4)}, make=_indexed(5), grad_inputs=(0,)),
    Case("take_grad", [(3, 7, 4), (7,)], F64_I32, attrs={"axis": -2, "shape": (3, 6, 4)}, make=_indexed(6),
         grad_inputs=(0,)),
    Case("take_grad", [(4, 3), (3,)], F32_I32, attrs={"axis": -1, "shape": (4, 5)}, make=_indexed(5),
         grad_inputs=(0,)),  # along the last axis: the sweep varies the indices' length
    Case("take_grad", [(4, 8, 32), (4, 8)], F32_I32, attrs={"shape": (50, 32)}, make=_indexed(50, True), grad=False),
    Case("gather_elements", [(4, 5), (4, 3)], F32_I64, attrs={"axis": 1}, make=_indexed(5), grad_inputs=(0,)),
    Case("gather_elements", [(3, 4, 2), (5, 4, 2)], F64_I32, make=_indexed(3), grad_inputs=(0,)),
    Case("gather_elements", [(3, 4, 2), (2, 3, 6)], F32_I32, attrs={"axis": -1}, make=_indexed(2, True),
         grad_inputs=(0,)),
    Case("gather_elements_grad", [(4, 3), (4, 3)], F32_I64, attrs={"axis": 1, "shape": (4, 5)}, make=_indexed(5),
         grad_inputs=(0,)),
    Case("gather_elements_grad", [(5, 4, 2), (5, 4, 2)], F64_I32, attrs={"shape": (3, 4, 2)}, make=_indexed(3),
         grad_inputs=(0,)),
]
