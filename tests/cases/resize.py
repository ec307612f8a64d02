from helpers import Case

TRANSFORMS = ("half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel")
ROUNDINGS = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")

CASES = [
    Case("resize2d", [(1, 3, 4, 5)], attrs={"size": (8, 10)}),
    Case("resize2d", [(2, 2, 5, 7)], attrs={"size": (3, 4), "mode": "linear"}),
    Case("resize2d", [(1, 2, 1, 3)], "int32", attrs={"size": (3, 7), "nearest_mode": "floor"}, grad=False),
    Case("resize2d", [(1, 1, 3, 4)], "bool", attrs={"size": (5, 9), "coordinate_transformation_mode": "asymmetric"},
         grad=False),
    Case("resize2d", [(2, 3, 9, 10)], attrs={"size": (17, 31), "mode": "linear"}, grad=False),
]
# every coordinate transform with every rounding, upsampling H and downsampling W by odd factors
for transform in TRANSFORMS:
    CASES += [Case("resize2d", [(1, 2, 3, 7)], "float64", attrs={
        "size": (7, 3), "coordinate_transformation_mode": transform, "nearest_mode": rounding})
        for rounding in ROUNDINGS]
    CASES += [
        Case("resize2d", [(1, 2, 3, 7)], "float64", attrs={"size": (7, 3), "mode": "linear",
                                                           "coordinate_transformation_mode": transform}),
        Case("resize2d", [(2, 1, 4, 5)], attrs={"size": (9, 1), "mode": "linear",
                                                "coordinate_transformation_mode": transform}),
        Case("resize2d", [(1, 2, 1, 6)], attrs={"size": (1, 4), "coordinate_transformation_mode": transform}),
        Case("resize2d_grad", [(1, 2, 7, 3)], "float64", attrs={"in_size": (3, 7), "mode": "linear",
                                                                "coordinate_transformation_mode": transform}),
        Case("resize2d_grad", [(2, 1, 9, 1)], attrs={"in_size": (4, 5), "mode": "linear",
                                                     "coordinate_transformation_mode": transform}),
    ]
    CASES += [Case("resize2d_grad", [(1, 2, 7, 3)], "float64", attrs={
        "in_size": (3, 7), "coordinate_transformation_mode": transform, "nearest_mode": rounding})
        for rounding in ROUNDINGS]
CASES += [
    Case("resize2d_grad", [(1, 3, 8, 10)], attrs={"in_size": (4, 5)}),
    Case("resize2d_grad", [(2, 3, 17, 31)], attrs={"in_size": (9, 10), "mode": "linear"}, grad=False),
    Case("resize2d_grad", [(1, 2, 6, 4)], attrs={"in_size": (13, 11), "mode": "linear",
                                                 "coordinate_transformation_mode": "align_corners"}),
]
