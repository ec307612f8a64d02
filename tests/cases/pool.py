from helpers import Case


def _ties(rng, shapes, dtypes):
    """Few distinct values, so windows hold several maxima (the first one wins)."""
    return [rng.integers(0, 3, s).astype(d) for s, d in zip(shapes, dtypes)]


CASES = []
for name in ["max_pool2d", "avg_pool2d"]:
    CASES += [
        Case(name, [(1, 2, 4, 6)], attrs={"kernel": 2}),
        Case(name, [(1, 2, 5, 7)], attrs={"kernel": 3, "stride": 2, "padding": 1}),
        Case(name, [(2, 1, 5, 5)], attrs={"kernel": (2, 3), "stride": (1, 2)}),
        Case(name, [(1, 3, 7, 9)], attrs={"kernel": 3, "stride": 1, "padding": (1, 0)}),
        Case(name, [(1, 2, 5, 7)], attrs={"kernel": 1, "stride": 2}),
        Case(name, [(1, 4, 6, 2)], attrs={"kernel": 2, "layout": "NHWC"}),
        Case(name, [(1, 5, 5, 2)], "float64", attrs={"kernel": 3, "stride": 2, "padding": 1, "layout": "NHWC"}),
        Case(name, [(2, 7, 9, 3)], attrs={"kernel": (3, 2), "stride": 2, "padding": 1, "layout": "NHWC"}, grad=False),
        Case(name, [(2, 8, 17, 17)], attrs={"kernel": 3, "stride": 2, "padding": 1}, grad=False),
    ]
CASES += [
    Case("max_pool2d_grad", [(1, 2, 5, 7), (1, 2, 3, 4)], attrs={"kernel": 3, "stride": 2, "padding": 1}),
    Case("max_pool2d_grad", [(1, 4, 6, 2), (1, 2, 3, 2)], attrs={"kernel": 2, "layout": "NHWC"}),
    Case("max_pool2d_grad", [(2, 3, 7, 9), (2, 3, 4, 5)], attrs={"kernel": 3, "stride": 2, "padding": 1}, make=_ties),
    Case("max_pool2d_grad", [(2, 7, 9, 3), (2, 6, 8, 3)], attrs={"kernel": 2, "stride": 1, "layout": "NHWC"},
         make=_ties),
    Case("avg_pool2d_grad", [(1, 2, 3, 4)], attrs={"kernel": 3, "stride": 2, "padding": 1, "shape": (1, 2, 5, 7)}),
    Case("avg_pool2d_grad", [(1, 2, 3, 2)], attrs={"kernel": 2, "layout": "NHWC", "shape": (1, 4, 6, 2)}),
    Case("global_avg_pool2d", [(2, 3, 4, 5)]), Case("global_avg_pool2d", [(1, 2, 1, 1)], "float64"),
    Case("global_avg_pool2d", [(2, 4, 3, 3)], attrs={"layout": "NHWC"}),
    Case("global_avg_pool2d", [(2, 3, 5, 4)], attrs={"keepdims": False}),
    Case("global_avg_pool2d", [(2, 5, 4, 3)], attrs={"layout": "NHWC", "keepdims": False}),
    Case("global_avg_pool2d", [(4, 64, 7, 7)], grad=False),
    Case("global_avg_pool2d", [(2, 2, 3, 4, 16)], attrs={"layout": "NCHWc"}),
]
