from helpers import Case, random_array


def _with_nans(rng, shapes, dtypes):
    arrays = [random_array(rng, s, d) for s, d in zip(shapes, dtypes)]
    for k, x in enumerate(arrays):
        if x.dtype.kind == "f":
            x.reshape(-1)[k::5] = float("nan")
    return arrays


CASES = [
    Case("minimum", [(4, 5), (4, 5)]), Case("minimum", [(3, 1, 5), (4, 1)]), Case("minimum", [(1,), (6, 7)]),
    Case("minimum", [(2, 3), (3,)], ["float32", "float64"]), Case("minimum", [(8, 3), (3,)], "int32", grad=False),
    Case("minimum", [(6, 5), (6, 5)], make=_with_nans, grad=False),
    Case("where", [(4, 5), (4, 5), (4, 5)], ["bool", "float32", "float32"]),
    Case("where", [(3, 1, 5), (4, 1), (5,)], ["bool", "float32", "float32"]),
    Case("where", [(4, 1), (1,), (3, 1, 5)], ["bool", "float64", "float64"]),
    Case("where", [(2, 3), (2, 3), (3,)], ["bool", "float32", "float64"]),
    Case("where", [(6,), (6,), (1,)], ["bool", "int32", "int64"], grad=False),
    Case("where", [(2, 5), (5,), (2, 1)], ["bool", "bool", "bool"], grad=False),
]
for name in ["less", "less_equal"]:
    CASES += [Case(name, [(4, 5), (5,)], grad=False), Case(name, [(3, 4), (3, 4)], "int32", grad=False),
              Case(name, [(3, 4), (4,)], "bool", grad=False),
              Case(name, [(2, 3), (3,)], ["int32", "float64"], grad=False),
              Case(name, [(5, 6), (5, 6)], make=_with_nans, grad=False)]
# the logical ops read any dtype as its truth value: nonzero, NaN true
CASES += [Case("logical_not", [(5, 7)], "bool"), Case("logical_not", [(1,)], "bool"),
          Case("logical_not", [(4, 6)], "int32"), Case("logical_not", [(9, 4)], "float64", make=_with_nans)]
for name in ["logical_and", "logical_or", "logical_xor"]:
    CASES += [Case(name, [(4, 5), (4, 5)], "bool"), Case(name, [(3, 1, 5), (4, 1)], "bool"),
              Case(name, [(1,), (6, 7)], "bool"), Case(name, [(3, 4), (4,)], ["int32", "bool"]),
              Case(name, [(6, 5), (6, 5)], ["float32", "int64"], make=_with_nans)]
