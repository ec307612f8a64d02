from helpers import Case


def _values_and_mask(rng, shapes, dtypes):
    x, mask = shapes
    return [rng.uniform(-2, 2, x).astype(dtypes[0]), rng.random(mask) < 0.5]


def _all_false(rng, shapes, dtypes):
    return [rng.uniform(-2, 2, shapes[0]).astype(dtypes[0]), False & (rng.random(shapes[1]) < 0)]


def _small_ints(rng, shapes, dtypes):
    return [rng.integers(-3, 4, s).astype(d) for s, d in zip(shapes, dtypes)]


def _sparse(rng, shapes, dtypes):
    x = rng.uniform(-2, 2, shapes[0])
    x[rng.random(shapes[0]) < 0.6] = 0
    return [x.astype(dtypes[0])]


CASES = [
    Case("masked_select", [(5, 7), (5, 7)], ["float32", "bool"], make=_values_and_mask, grad_inputs=(0,)),
    Case("masked_select", [(2, 3, 4), (2, 3, 4)], ["float64", "bool"], make=_values_and_mask, grad_inputs=(0,)),
    Case("masked_select", [(9,), (9,)], ["int32", "bool"], make=_values_and_mask, grad=False),
    Case("masked_select", [(3, 3), (3, 3)], ["float32", "bool"], make=_all_false, grad=False),
    Case("masked_scatter", [(12,), (3, 4)], ["float64", "bool"], make=_values_and_mask, grad_inputs=(0,)),
    Case("masked_scatter", [(5,), (5,)], ["float32", "bool"], make=_values_and_mask, grad_inputs=(0,)),
    Case("nonzero", [(4, 6)], "float32", make=_sparse, grad=False),
    Case("nonzero", [(3, 2, 5)], "int32", make=_small_ints, grad=False),
    Case("nonzero", [(7,)], "bool", grad=False),
    Case("unique", [(6, 5)], "int32", make=_small_ints, grad=False),
    Case("unique", [(40,)], "float32", make=_small_ints, grad=False),
    Case("unique", [(1,)], "int64", make=_small_ints, grad=False),
]
