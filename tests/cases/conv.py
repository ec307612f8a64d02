from helpers import Case

NHWC = {"layout": "NHWC"}

CASES = [
    # NCHW, weights OIHW
    Case("conv2d", [(1, 2, 5, 6), (3, 2, 3, 3)]),
    Case("conv2d", [(2, 3, 7, 9), (4, 3, 3, 3)], attrs={"stride": 2, "padding": 1}, grad=False),
    Case("conv2d", [(2, 1, 5, 7), (2, 1, 3, 3)], attrs={"stride": 2, "padding": 1}),
    Case("conv2d", [(1, 2, 6, 5), (2, 2, 3, 2)], attrs={"stride": (2, 1), "padding": (1, 0)}),
    Case("conv2d", [(1, 1, 8, 8), (2, 1, 3, 3)], attrs={"stride": 3}),
    Case("conv2d", [(1, 1, 7, 7), (1, 1, 1, 1)]),  # a weight of one value: its copy has no loop
    Case("conv2d", [(1, 2, 7, 7), (2, 2, 2, 2)], attrs={"dilation": 2, "padding": 2}),
    Case("conv2d", [(1, 1, 9, 7), (2, 1, 3, 2)], attrs={"stride": 2, "dilation": (2, 3), "padding": 1}),
    Case("conv2d", [(1, 3, 4, 4), (2, 3, 1, 1)], "float64"),
    Case("conv2d", [(1, 3, 19, 19), (4, 3, 7, 7)], attrs={"stride": 2, "padding": 3}, grad=False),
    Case("conv2d", [(2, 16, 14, 14), (32, 16, 3, 3)], attrs={"padding": 1}, grad=False),
    # NHWC, weights HWIO
    Case("conv2d", [(1, 5, 6, 2), (3, 3, 2, 3)], attrs={**NHWC, "padding": 1}),
    Case("conv2d", [(1, 6, 5, 2), (2, 2, 2, 2)], attrs={**NHWC, "stride": 2, "dilation": (1, 2)}),
    Case("conv2d", [(2, 5, 7, 1), (3, 3, 1, 2)], attrs={**NHWC, "stride": 2, "padding": 1}),
    Case("conv2d", [(1, 4, 5, 3), (1, 1, 3, 4)], "float64", attrs={**NHWC, "stride": 2}),
    Case("conv2d", [(2, 7, 9, 3), (3, 3, 3, 8)], attrs={**NHWC, "padding": 1}, grad=False),
    Case("conv2d", [(1, 19, 19, 3), (7, 7, 3, 4)], attrs={**NHWC, "stride": 2, "padding": 3}, grad=False),
]
CASES += [  # inference with a pre-packed weight: blocks of oc output channels, the last one padded past O
    Case("pack_conv2d_weight", [(20, 3, 3, 3)], attrs={"oc": 16}),
    Case("pack_conv2d_weight", [(5, 2, 3, 2)], "float64", attrs={"oc": 8}),
    Case("pack_conv2d_weight", [(32, 4, 1, 1)], attrs={"oc": 16}),
    # random weights past out_channels: the kernel must never read them
    Case("conv2d_packed", [(2, 3, 7, 9), (2, 3, 3, 3, 16)], attrs={"out_channels": 20, "stride": 2, "padding": 1}),
    Case("conv2d_packed", [(1, 3, 4, 4), (1, 3, 1, 1, 4)], "float64", attrs={"out_channels": 2}),
    Case("conv2d_packed", [(2, 16, 14, 14), (2, 16, 3, 3, 16)], attrs={"out_channels": 32, "padding": 1}),
    Case("conv2d_packed", [(1, 2, 7, 7), (1, 2, 2, 2, 8)], attrs={"out_channels": 3, "dilation": 2, "padding": 2}),
    Case("conv2d_packed", [(1, 2, 6, 5), (1, 2, 3, 2, 2)], attrs={"out_channels": 2, "stride": (2, 1),
                                                                  "padding": (1, 0)}),
]
CASES += [  # Winograd F(2x2, 3x3) and F(4x4, 3x3): the weight transform, and the convolution reading it (any U: the reference
    # is the same algorithm in numpy; tests/test_winograd.py compares with the direct convolution)
    Case("winograd_conv2d_weight", [(20, 3, 3, 3)], attrs={"oc": 16}),
    Case("winograd_conv2d_weight", [(5, 2, 3, 3)], "float64", attrs={"oc": 8}),
    Case("winograd_conv2d_weight", [(5, 20, 3, 3)], attrs={"oc": 16, "tile": 4, "flip": True}),  # a data gradient's
    Case("conv2d_winograd", [(2, 16, 8, 8), (1, 4, 4, 16, 32)], attrs={"out_channels": 32, "padding": 1}),
    Case("conv2d_winograd", [(1, 3, 7, 5), (1, 4, 4, 3, 8)], "float64", attrs={"out_channels": 5, "padding": 1}),
    Case("conv2d_winograd", [(2, 2, 8, 8, 8), (2, 4, 4, 16, 16)],
         attrs={"out_channels": 20, "padding": 0, "in_block": 8, "out_block": True}),    Case("winograd_conv2d_weight", [(20, 3, 3, 3)], attrs={"oc": 16, "tile": 4}),
    # F(4x4): its transforms scale by up to 8; inputs of [-1/4, 1/4] keep float32's rounding within atol
    Case("conv2d_winograd", [(2, 16, 8, 8), (1, 6, 6, 16, 32)], attrs={"out_channels": 32, "padding": 1},
         low=-0.25, high=0.25),
    Case("conv2d_winograd", [(1, 3, 9, 6), (1, 6, 6, 3, 8)], "float64", attrs={"out_channels": 5, "padding": 1}),
]
CASES += [  # channel-blocked layouts (NCHW[c]c): the conversions, and a packed conv reading or writing blocks
    Case("to_blocked", [(2, 20, 3, 4)], attrs={"block": 16}),
    Case("to_blocked", [(1, 5, 2, 3)], "float64", attrs={"block": 8}),
    Case("to_blocked", [(1, 32, 2, 2)], attrs={"block": 16}),
    Case("from_blocked", [(2, 2, 3, 4, 16)], attrs={"channels": 20}),
    Case("from_blocked", [(1, 1, 2, 3, 8)], "float64", attrs={"channels": 5}),
    # the input's channels past the weight's I (padding of its last block) are never read
    Case("conv2d_packed", [(2, 2, 7, 9, 16), (2, 20, 3, 3, 16)],
         attrs={"out_channels": 20, "stride": 2, "padding": 1, "in_block": 16, "out_block": True}),
    Case("conv2d_packed", [(1, 1, 6, 5, 8), (1, 3, 3, 2, 4)], "float64", attrs={"out_channels": 3, "in_block": 8}),
    Case("conv2d_packed", [(2, 16, 8, 8), (2, 16, 3, 3, 16)], attrs={"out_channels": 32, "padding": 1,
                                                                     "out_block": True}),
]
CASES += [  # a depthwise conv in channel blocks (weights from pack_conv2d_weight of (C, 1, KH, KW)): blocked or NCHW
    # input and output, blocks of the input narrower, as wide or wider than the weight's, channels past C (random
    # weights in the last block's padding: never read into a channel below C), stride, dilation
    Case("depthwise_conv2d_packed", [(2, 2, 9, 9, 16), (2, 1, 3, 3, 16)],
         attrs={"channels": 32, "padding": 1, "in_block": 16, "out_block": True}),
    Case("depthwise_conv2d_packed", [(1, 1, 8, 8, 32), (2, 1, 3, 3, 16)],
         attrs={"channels": 32, "padding": 1, "stride": 2, "in_block": 32, "out_block": True}),
    Case("depthwise_conv2d_packed", [(2, 20, 7, 7), (2, 1, 3, 3, 16)], attrs={"channels": 20, "padding": 1}),
    Case("depthwise_conv2d_packed", [(1, 3, 6, 6, 8), (2, 1, 3, 3, 16)],
         attrs={"channels": 20, "padding": 1, "in_block": 8, "out_block": True}),
    Case("depthwise_conv2d_packed", [(1, 5, 9, 7), (1, 1, 3, 2, 8)], "float64",
         attrs={"channels": 5, "stride": (2, 1), "dilation": 2, "padding": (2, 1)}),
]
# the weight gradient's own op: odd shapes, strides, padding, dilation; its own gradient (dx, dgy) checked too
CASES += [
    Case("conv2d_backward_weight", [(2, 3, 7, 9), (2, 4, 7, 9)], attrs={"kernel": 3, "padding": 1}),
    Case("conv2d_backward_weight", [(2, 3, 9, 11), (2, 5, 5, 6)], attrs={"kernel": 3, "padding": 1, "stride": 2}),
    Case("conv2d_backward_weight", [(1, 2, 9, 11), (1, 3, 5, 9)], attrs={"kernel": (3, 2), "dilation": 2}),
    Case("conv2d_backward_weight", [(1, 2, 6, 5), (1, 2, 3, 4)], attrs={"kernel": (3, 2), "stride": (2, 1),
                                                                       "padding": (1, 0)}, grad=False),
    Case("conv2d_backward_weight", [(2, 8, 6, 6), (2, 20, 6, 6)], attrs={"kernel": 3, "padding": 1}, grad=False),
    Case("conv2d_backward_weight", [(2, 3, 8, 8), (2, 6, 8, 8)], "float64", attrs={"kernel": 3, "padding": 1}),
]
# the data gradient (the transposed convolution): strides whose input sizes leave a remainder, dilation, a
# padding wider than the kernel, and its own gradient (dgy, dw)
CASES += [
    Case("conv2d_backward_data", [(2, 4, 7, 9), (4, 3, 3, 3)], attrs={"in_size": (7, 9), "padding": 1}),
    Case("conv2d_backward_data", [(2, 5, 5, 6), (5, 3, 3, 3)], attrs={"in_size": (9, 11), "padding": 1, "stride": 2}),
    Case("conv2d_backward_data", [(2, 4, 4, 4), (4, 3, 3, 3)], attrs={"in_size": (9, 10), "stride": 2}),
    Case("conv2d_backward_data", [(1, 3, 5, 9), (3, 2, 3, 2)], attrs={"in_size": (9, 11), "dilation": 2}),
    Case("conv2d_backward_data", [(2, 4, 8, 8), (4, 6, 1, 1)], attrs={"in_size": 6, "padding": 1}, grad=False),
    Case("conv2d_backward_data", [(2, 20, 6, 6), (20, 24, 3, 3)], attrs={"in_size": 6, "padding": 1}, grad=False),
    Case("conv2d_backward_data", [(2, 3, 4, 4), (3, 2, 3, 3)], "float64", attrs={"in_size": 4, "padding": 1}),
    # per phase (a stride, no dilation): a 7x7 stem, a 1x1 downsample (odd rows and columns get nothing), one
    # strided axis only, a stride above the kernel (phases with no tap), and a stride with a dilation (placed grid)
    Case("conv2d_backward_data", [(2, 3, 4, 5), (3, 5, 7, 7)], attrs={"in_size": (8, 9), "padding": 3, "stride": 2}),
    Case("conv2d_backward_data", [(2, 6, 4, 4), (6, 4, 1, 1)], attrs={"in_size": 8, "stride": 2}, grad=False),
    Case("conv2d_backward_data", [(2, 3, 5, 6), (3, 5, 2, 3)], attrs={"in_size": (9, 8), "stride": (2, 1),
                                                                      "padding": (1, 0)}),
    Case("conv2d_backward_data", [(1, 3, 3, 3), (3, 2, 2, 2)], attrs={"in_size": (8, 9), "stride": 3}),
    Case("conv2d_backward_data", [(1, 3, 4, 4), (3, 2, 3, 3)], attrs={"in_size": (9, 9), "stride": 2, "padding": 1,
                                                                      "dilation": 2}, grad=False),
]
# grouped and depthwise convolutions (``groups``): each output channel reads its group's input channels only; a
# depthwise conv (groups = C) with channel multiplier 1 and 2; their gradients are grouped ops too
CASES += [
    Case("conv2d", [(2, 4, 5, 6), (6, 2, 3, 3)], attrs={"groups": 2, "padding": 1}),
    Case("conv2d", [(1, 3, 6, 7), (3, 1, 3, 3)], attrs={"groups": 3, "padding": 1}),
    Case("conv2d", [(2, 3, 7, 6), (6, 1, 3, 3)], attrs={"groups": 3, "stride": 2, "padding": 1}),
    Case("conv2d", [(1, 4, 8, 7), (4, 2, 3, 2)], attrs={"groups": 2, "dilation": 2, "padding": (2, 1)}),
    Case("conv2d", [(1, 6, 5, 5), (6, 2, 1, 1)], "float64", attrs={"groups": 3}),
    Case("conv2d", [(1, 5, 6, 4), (3, 3, 1, 8)], attrs={**NHWC, "groups": 4, "padding": 1}),
    Case("conv2d", [(2, 7, 6, 4), (3, 3, 2, 4)], attrs={**NHWC, "groups": 2, "stride": 2, "padding": 1}),
    Case("conv2d", [(1, 5, 5, 3), (2, 2, 1, 3)], "float64", attrs={**NHWC, "groups": 3, "dilation": 2}),
    # the template's vectors and register tiles: a MobileNet-style depthwise 3x3 at stride 1 and 2 (the padded
    # input stored by column phase), a multiplier of 2, a ResNeXt-style grouped conv, a 7x7 map (scalar columns)
    Case("conv2d", [(2, 32, 14, 14), (32, 1, 3, 3)], attrs={"groups": 32, "padding": 1}, grad=False),
    Case("conv2d", [(1, 24, 28, 28), (24, 1, 3, 3)], attrs={"groups": 24, "stride": 2, "padding": 1}, grad=False),
    Case("conv2d", [(1, 16, 15, 17), (32, 1, 3, 3)], attrs={"groups": 16, "stride": 2, "padding": 1}, grad=False),
    Case("conv2d", [(2, 32, 28, 28), (32, 4, 3, 3)], attrs={"groups": 8, "padding": 1}, grad=False),
    Case("conv2d", [(1, 64, 7, 7), (64, 1, 3, 3)], "float64", attrs={"groups": 64, "padding": 1}, grad=False),
    Case("conv2d", [(1, 16, 14, 14), (16, 1, 5, 5)], attrs={"groups": 16, "padding": 4, "dilation": 2}, grad=False),
    Case("conv2d", [(1, 14, 14, 32), (3, 3, 1, 32)], attrs={**NHWC, "groups": 32, "padding": 1}, grad=False),
    # the gradients' own ops, grouped, and their gradients
    Case("conv2d_backward_data", [(2, 6, 5, 6), (6, 2, 3, 3)], attrs={"in_size": (5, 6), "padding": 1, "groups": 2}),
    Case("conv2d_backward_data", [(2, 6, 3, 4), (6, 1, 3, 3)], attrs={"in_size": (6, 7), "padding": 1, "stride": 2,
                                                                      "groups": 3}),
    Case("conv2d_backward_data", [(1, 4, 8, 7), (4, 2, 3, 2)], attrs={"in_size": (8, 7), "padding": (2, 1),
                                                                      "dilation": 2, "groups": 2}),
    Case("conv2d_backward_data", [(1, 4, 4, 4), (4, 1, 3, 3)], "float64", attrs={"in_size": 4, "padding": 1,
                                                                                 "groups": 4}),
    # per phase where the input is whole cycles of the phases (the others above run on the placed grid): a 3x3 at
    # stride 2, one strided axis, a 1x1 (odd rows and columns get nothing), a depthwise layer of a vector's columns
    Case("conv2d_backward_data", [(1, 4, 3, 4), (4, 2, 3, 3)], attrs={"in_size": (6, 8), "padding": 1, "stride": 2,
                                                                      "groups": 2}),
    Case("conv2d_backward_data", [(2, 6, 3, 5), (6, 1, 3, 2)], attrs={"in_size": (6, 6), "padding": (1, 0),
                                                                      "stride": (2, 1), "groups": 3}),
    Case("conv2d_backward_data", [(1, 4, 3, 3), (4, 1, 1, 1)], "float64", attrs={"in_size": 6, "stride": 2,
                                                                                 "groups": 4}),
    Case("conv2d_backward_data", [(2, 32, 7, 7), (32, 1, 3, 3)], attrs={"in_size": 14, "padding": 1, "stride": 2,
                                                                        "groups": 32}, grad=False),
    Case("conv2d_backward_data", [(1, 32, 14, 14), (32, 1, 3, 3)], attrs={"in_size": 28, "padding": 1, "stride": 2,
                                                                          "groups": 16}, grad=False),
    Case("conv2d_backward_data", [(1, 32, 14, 14), (32, 4, 3, 3)], attrs={"in_size": 14, "padding": 1, "groups": 8},
         grad=False),
    Case("conv2d_backward_weight", [(2, 4, 5, 6), (2, 6, 5, 6)], attrs={"kernel": 3, "padding": 1, "groups": 2}),
    Case("conv2d_backward_weight", [(2, 3, 7, 6), (2, 6, 4, 3)], attrs={"kernel": 3, "padding": 1, "stride": 2,
                                                                        "groups": 3}),
    Case("conv2d_backward_weight", [(1, 4, 8, 7), (1, 4, 8, 7)], attrs={"kernel": (3, 2), "padding": (2, 1),
                                                                        "dilation": 2, "groups": 2}),
    Case("conv2d_backward_weight", [(1, 3, 5, 5), (1, 3, 5, 5)], "float64", attrs={"kernel": 3, "padding": 1,
                                                                                  "groups": 3}),
    Case("conv2d_backward_weight", [(2, 32, 14, 14), (2, 32, 14, 14)], attrs={"kernel": 3, "padding": 1,
                                                                              "groups": 32}, grad=False),
    Case("conv2d_backward_weight", [(1, 32, 28, 28), (1, 32, 14, 14)], attrs={"kernel": 3, "padding": 1, "stride": 2,
                                                                              "groups": 8}, grad=False),
]
