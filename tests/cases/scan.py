from helpers import Case, random_array


def _with_nans(rng, shapes, dtypes):
    x = random_array(rng, shapes[0], dtypes[0])
    x.reshape(-1)[3::11] = float("nan")
    return [x]


def _small_ints(rng, shapes, dtypes):
    """Few distinct values, so the extreme one is tied."""
    return [rng.integers(-3, 3, shapes[0]).astype(dtypes[0])]


CASES = [
    Case("min", [(7, 13)], attrs={"axis": 1}), Case("min", [(7, 13)], attrs={"axis": 0, "keepdims": True}),
    Case("min", [(3, 4, 5)], attrs={"axis": (0, 2)}), Case("min", [(3, 4, 5)], attrs={"axis": -1, "keepdims": True}),
    Case("min", [(6, 5)]), Case("min", [(4, 1, 3)], "float64", attrs={"axis": (1,)}),
    Case("min", [(5, 6)], "int32", attrs={"axis": 1}, grad=False),
    Case("min", [(33, 70)], attrs={"axis": 1}, grad=False), Case("min", [(70, 33)], attrs={"axis": 0}, grad=False),
    Case("min", [(8, 11)], attrs={"axis": 1}, make=_with_nans, grad=False),
]
for name in ["argmax", "argmin"]:
    CASES += [
        Case(name, [(7, 13)]), Case(name, [(7, 13)], attrs={"axis": 1, "keepdims": False}),
        Case(name, [(3, 4, 5)], "float64", attrs={"axis": -2}), Case(name, [(33, 70)], attrs={"axis": 1}),
        Case(name, [(70, 33)], attrs={"axis": 0, "keepdims": False}), Case(name, [(9,)], attrs={"keepdims": False}),
        Case(name, [(6, 40)], "int32", attrs={"axis": 1}, make=_small_ints),
        Case(name, [(6, 40)], "int64", attrs={"axis": 1, "select_last_index": True}, make=_small_ints),
        Case(name, [(40, 6)], "int32", attrs={"select_last_index": True, "keepdims": False}, make=_small_ints),
        Case(name, [(8, 11)], attrs={"axis": 1}, make=_with_nans),
        Case(name, [(8, 11)], attrs={"axis": 1, "select_last_index": True}, make=_with_nans),
    ]
for attrs in [{"axis": 0}, {"axis": 1, "exclusive": True}, {"axis": -1, "reverse": True},
              {"axis": 0, "exclusive": True, "reverse": True}]:
    CASES += [Case("cumsum", [(6, 9)], attrs=attrs), Case("cumsum", [(3, 4, 5)], "float64", attrs=attrs),
              Case("cumsum", [(5, 7)], "int32", attrs=attrs, grad=False)]
CASES += [Case("cumsum", [(1,)], attrs={"axis": 0}), Case("cumsum", [(4, 300)], attrs={"axis": 1}, grad=False),
          Case("cumsum", [(300, 4)], "int64", attrs={"axis": 0, "reverse": True}, grad=False),
          Case("cumsum", [(2, 3, 4)], attrs={"axis": 1, "exclusive": True})]
