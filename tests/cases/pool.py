from helpers import Case

CASES = []
for name in ["max_pool2d", "avg_pool2d"]:
    CASES += [
        Case(name, [(1, 2, 4, 6)], attrs={"kernel": 2}), Case(name, [(1, 2, 5, 7)], attrs={"kernel": 3, "stride": 2, "padding": 1}),
        Case(name, [(2, 1, 5, 5)], attrs={"kernel": (2, 3), "stride": (1, 2)}),
        Case(name, [(1, 4, 6, 2)], attrs={"kernel": 2, "layout": "NHWC"}),
        Case(name, [(1, 5, 5, 2)], "float64", attrs={"kernel": 3, "stride": 2, "padding": 1, "layout": "NHWC"}),
        Case(name, [(2, 8, 17, 17)], attrs={"kernel": 3, "stride": 2, "padding": 1}, grad=False),
    ]
CASES += [
    Case("max_pool2d_grad", [(1, 2, 5, 7), (1, 2, 3, 4)], attrs={"kernel": 3, "stride": 2, "padding": 1}),
    Case("max_pool2d_grad", [(1, 4, 6, 2), (1, 2, 3, 2)], attrs={"kernel": 2, "layout": "NHWC"}),
    Case("avg_pool2d_grad", [(1, 2, 3, 4)], attrs={"kernel": 3, "stride": 2, "padding": 1, "shape": (1, 2, 5, 7)}),
    Case("avg_pool2d_grad", [(1, 2, 3, 2)], attrs={"kernel": 2, "layout": "NHWC", "shape": (1, 4, 6, 2)}),
    Case("global_avg_pool2d", [(2, 3, 4, 5)]), Case("global_avg_pool2d", [(1, 2, 1, 1)], "float64"),
    Case("global_avg_pool2d", [(4, 64, 7, 7)], grad=False),
]
