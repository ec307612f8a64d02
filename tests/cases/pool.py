import numpy as np
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
        # ceil_mode: the last windows run past the input (H 6, W 8: one window more each way)
        Case(name, [(1, 2, 6, 8)], attrs={"kernel": 3, "stride": 2, "ceil_mode": True}),
        Case(name, [(2, 3, 6, 8)], "float64", attrs={"kernel": 3, "stride": 2, "ceil_mode": True}),
        # a last window that would start in the right padding is dropped (H: 3 windows, not 4)
        Case(name, [(1, 2, 5, 5)], attrs={"kernel": 2, "stride": 2, "padding": 1, "ceil_mode": True}),
        Case(name, [(1, 7, 5, 2)], attrs={"kernel": 2, "stride": 2, "padding": 1, "ceil_mode": True,
                                          "layout": "NHWC"}),
        # asymmetric padding, ONNX's (top, left, bottom, right)
        Case(name, [(1, 2, 5, 6)], attrs={"kernel": 2, "stride": 1, "padding": (1, 0, 0, 1)}),
        Case(name, [(1, 2, 7, 7)], "float64", attrs={"kernel": 3, "stride": 2, "padding": (0, 1, 1, 0),
                                                     "ceil_mode": True}),
        Case(name, [(1, 6, 5, 3)], attrs={"kernel": (2, 3), "stride": 2, "padding": (1, 1, 0, 1), "layout": "NHWC"}),
    ]
CASES += [
    # dilation (max_pool2d only)
    Case("max_pool2d", [(1, 2, 7, 9)], attrs={"kernel": 3, "padding": 1, "stride": 1, "dilation": 2}),
    Case("max_pool2d", [(1, 2, 8, 7)], "float64", attrs={"kernel": 2, "stride": (2, 1), "dilation": (2, 3)}),
    Case("max_pool2d", [(2, 1, 9, 8)], attrs={"kernel": 3, "stride": 2, "padding": (2, 1, 1, 2), "dilation": 2,
                                              "ceil_mode": True}),
    Case("max_pool2d", [(1, 7, 9, 2)], attrs={"kernel": 2, "stride": 2, "dilation": 2, "ceil_mode": True,
                                              "layout": "NHWC"}),
    Case("max_pool2d", [(2, 8, 17, 17)], attrs={"kernel": 3, "stride": 2, "padding": 2, "dilation": 2}, grad=False),
    # count_include_pad: the explicit padding counts, not what ceil_mode adds past it
    Case("avg_pool2d", [(1, 2, 5, 7)], attrs={"kernel": 3, "stride": 2, "padding": 1, "count_include_pad": True}),
    Case("avg_pool2d", [(1, 2, 6, 6)], "float64", attrs={"kernel": 3, "stride": 2, "padding": 1, "ceil_mode": True,
                                                         "count_include_pad": True}),
    Case("avg_pool2d", [(1, 2, 5, 6)], attrs={"kernel": 2, "stride": 2, "padding": (1, 0, 0, 1), "ceil_mode": True,
                                              "count_include_pad": True}),
    Case("avg_pool2d", [(1, 6, 7, 3)], attrs={"kernel": 3, "stride": 2, "padding": 1, "count_include_pad": True,
                                              "layout": "NHWC"}),
]

def _codes(rng, shapes, dtypes):
    """Integer codes over their whole range (the padding's least code can tie)."""
    return [rng.integers(np.iinfo(d).min, np.iinfo(d).max + 1, s).astype(d) for s, d in zip(shapes, dtypes)]


CASES += [
    # int8 codes (``graph/requantize.py``: ResNet's stem writes uint8 codes, the max pool pools them)
    Case("max_pool2d", [(2, 8, 17, 17)], "uint8", attrs={"kernel": 3, "stride": 2, "padding": 1}, make=_codes,
         grad=False),
    Case("max_pool2d", [(1, 5, 7, 3)], "int8", attrs={"kernel": 2, "stride": 2, "padding": 1, "ceil_mode": True,
                                                     "layout": "NHWC"}, make=_codes, grad=False),
    # in channel blocks (graph.layout: between blocked convolutions; schedules/cpu/pool.py)
    Case("max_pool2d", [(2, 3, 17, 17, 16)], attrs={"kernel": 3, "stride": 2, "padding": 1, "layout": "NCHWc"},
         grad=False),
    Case("max_pool2d", [(1, 2, 9, 10, 16)], "uint8", attrs={"kernel": 3, "stride": 2, "padding": 1,
                                                           "layout": "NCHWc"}, make=_codes, grad=False),
    Case("max_pool2d", [(1, 1, 7, 7, 8)], attrs={"kernel": 2, "stride": 1, "dilation": 2, "ceil_mode": True,
                                                 "layout": "NCHWc"}, grad=False),
]
CASES += [
    Case("max_pool2d_grad", [(1, 2, 5, 7), (1, 2, 3, 4)], attrs={"kernel": 3, "stride": 2, "padding": 1}),
    Case("max_pool2d_grad", [(1, 4, 6, 2), (1, 2, 3, 2)], attrs={"kernel": 2, "layout": "NHWC"}),
    Case("max_pool2d_grad", [(2, 3, 7, 9), (2, 3, 4, 5)], attrs={"kernel": 3, "stride": 2, "padding": 1}, make=_ties),
    Case("max_pool2d_grad", [(2, 7, 9, 3), (2, 6, 8, 3)], attrs={"kernel": 2, "stride": 1, "layout": "NHWC"},
         make=_ties),
    Case("max_pool2d_grad", [(1, 2, 6, 8), (1, 2, 3, 4)], attrs={"kernel": 3, "stride": 2, "ceil_mode": True},
         make=_ties),
    Case("max_pool2d_grad", [(2, 1, 9, 8), (2, 1, 5, 4)], "float64",
         attrs={"kernel": 3, "stride": 2, "padding": (2, 1, 1, 2), "dilation": 2, "ceil_mode": True}, make=_ties),
    Case("max_pool2d_grad", [(1, 8, 7, 2), (1, 4, 4, 2)], attrs={"kernel": 2, "stride": (1, 1), "dilation": (4, 3),
                                                                 "layout": "NHWC"}),
    Case("avg_pool2d_grad", [(1, 2, 3, 4)], attrs={"kernel": 3, "stride": 2, "padding": 1, "shape": (1, 2, 5, 7)}),
    Case("avg_pool2d_grad", [(1, 2, 3, 2)], attrs={"kernel": 2, "layout": "NHWC", "shape": (1, 4, 6, 2)}),
    Case("avg_pool2d_grad", [(1, 2, 4, 4)], "float64", attrs={"kernel": 3, "stride": 2, "padding": 1, "ceil_mode": True,
                                                              "count_include_pad": True, "shape": (1, 2, 6, 6)}),
    Case("avg_pool2d_grad", [(1, 2, 3, 4)], attrs={"kernel": 2, "stride": 2, "padding": (1, 0, 0, 1),
                                                   "ceil_mode": True, "shape": (1, 2, 5, 8)}),
    Case("global_avg_pool2d", [(2, 3, 4, 5)]), Case("global_avg_pool2d", [(1, 2, 1, 1)], "float64"),
    Case("global_avg_pool2d", [(2, 4, 3, 3)], attrs={"layout": "NHWC"}),
    Case("global_avg_pool2d", [(2, 3, 5, 4)], attrs={"keepdims": False}),
    Case("global_avg_pool2d", [(2, 5, 4, 3)], attrs={"layout": "NHWC", "keepdims": False}),
    Case("global_avg_pool2d", [(4, 64, 7, 7)], grad=False),
    Case("global_avg_pool2d", [(2, 2, 3, 4, 16)], attrs={"layout": "NCHWc"}),
]
