from helpers import Case

CASES = [
    Case("reshape", [(4, 6)], attrs={"shape": (3, 8)}), Case("reshape", [(4, 6)], attrs={"shape": (-1, 2)}),
    Case("reshape", [(2, 3, 4)], "int32", attrs={"shape": (24,)}, grad=False),
    Case("reshape", [(5,)], attrs={"shape": (1, 5, 1)}),
    Case("broadcast_to", [(3, 1)], attrs={"shape": (2, 3, 4)}), Case("broadcast_to", [(1,)], attrs={"shape": (7,)}),
    Case("broadcast_to", [(4,)], "int32", attrs={"shape": (3, 4)}, grad=False),
]

S = (None, None, None)
CASES += [
    Case("transpose", [(3, 5)]), Case("transpose", [(2, 3, 4)], attrs={"axes": (1, 2, 0)}),
    Case("transpose", [(2, 3, 4)], "int32", attrs={"axes": (-1, 0, 1)}, grad=False),
    Case("flip", [(4, 5)], attrs={"axis": 1}), Case("flip", [(3, 2, 5)]), Case("flip", [(6,)], "int32", grad=False),
    Case("pad", [(3, 4)], attrs={"pad_width": ((1, 2), (0, 3))}),
    Case("pad", [(2, 3)], "int32", attrs={"pad_width": ((0, 0), (2, 2)), "value": 7}, grad=False),
    Case("dilate", [(3, 4)], attrs={"axes": (0,), "dilation": 1}), Case("dilate", [(2, 3)], attrs={"axes": (0, 1), "dilation": 2}),
    Case("undilate", [(6, 4)], attrs={"axes": (0,), "dilation": 1}), Case("undilate", [(7, 5)], attrs={"axes": (0, 1), "dilation": 2}),
    Case("getitem", [(7, 9)], attrs={"index": ((1, 6, 2), (None, None, -1))}),
    Case("getitem", [(7, 9)], attrs={"index": (-2,)}), Case("getitem", [(4, 5, 6)], attrs={"index": ("...", (-3, None, 1))}),
    Case("getitem", [(8, 5)], attrs={"index": ((-1, -8, -3), 2)}),
    Case("getitem", [(5, 4)], "int32", attrs={"index": ((None, None, 2),)}, grad=False),
    Case("getitem_grad", [(3, 9)], attrs={"index": ((1, 6, 2), (None, None, -1)), "shape": (7, 9)}),
    Case("getitem_grad", [(9,)], attrs={"index": (-2,), "shape": (7, 9)}),
    Case("stack", [(3, 4), (3, 4)]), Case("stack", [(2, 3), (2, 3), (2, 3)], attrs={"axis": -1}),
    Case("stack", [(5,), (5,)], "int32", grad=False),
    Case("concatenate", [(2, 3), (4, 3)]), Case("concatenate", [(2, 3), (2, 1), (2, 2)], attrs={"axis": 1}),
    Case("concatenate", [(2,), (3,)], ["int32", "float32"], grad=False),
    Case("split", [(6, 4)], attrs={"sections": 3}), Case("split", [(2, 8)], attrs={"axis": -1, "sections": 2}),
    Case("split", [(4, 4)], "int32", attrs={"sections": 1}, grad=False),
]
