from helpers import Case

UNARY = ["negate", "abs", "relu", "exp", "tanh", "sigmoid"]
POSITIVE = ["log", "sqrt"]
BINARY = ["add", "subtract", "multiply", "divide", "maximum"]
SCALAR = {"add_scalar": 1.5, "subtract_scalar": 0.5, "rsubtract_scalar": 2.0, "multiply_scalar": -3.0,
          "divide_scalar": 4.0, "maximum_scalar": 0.25}

CASES = []
for name in UNARY + POSITIVE:
    low = 0.1 if name in POSITIVE else -2.0
    CASES += [Case(name, [(17, 33)], low=low), Case(name, [(1,)], low=low),
              Case(name, [(2, 3, 5)], "float64", low=low), Case(name, [(7, 9)], "int32", low=1 if name in POSITIVE else -2, grad=False)]
CASES += [Case("sign", [(5, 7)], grad=False), Case("sign", [(5, 7)], "int32", grad=False)]
for name in BINARY:
    CASES += [Case(name, [(4, 5), (4, 5)]), Case(name, [(3, 1, 5), (4, 1)]), Case(name, [(1,), (6, 7)]),
              Case(name, [(2, 3), (3,)], ["float32", "float64"]), Case(name, [(8, 3), (3,)], "int32", grad=False)]
CASES += [Case("divide", [(4, 5), (4, 5)], low=0.5, high=2.0), Case("power", [(4, 5), (4, 5)], low=0.5),
          Case("power", [(3, 1), (1, 4)], "float64", low=0.5)]
for name, scalar in SCALAR.items():
    CASES += [Case(name, [(33, 5)], attrs={"scalar": scalar}), Case(name, [(6,)], "int32", attrs={"scalar": 2},
                                                                     grad=False)]
CASES += [Case("rdivide_scalar", [(9, 4)], attrs={"scalar": 2.0}, low=0.5),
          Case("power_scalar", [(9, 4)], attrs={"scalar": 3}), Case("power_scalar", [(9, 4)], attrs={"scalar": 0.5}, low=0.5),
          Case("add_scalar", [(5,)], "int32", attrs={"scalar": 1.5}, grad=False)]
for name in ["equal", "greater_equal", "greater"]:
    CASES += [Case(name, [(4, 5), (5,)], grad=False), Case(name, [(3, 4), (3, 4)], "int32", grad=False),
              Case(name + "_scalar", [(10,)], "int32", attrs={"scalar": 1}, grad=False),
              Case(name + "_scalar", [(10,)], attrs={"scalar": 0.5}, grad=False),
              Case(name, [(3, 4), (4,)], "bool", grad=False),
              Case(name + "_scalar", [(6,)], "bool", attrs={"scalar": False}, grad=False)]
CASES += [Case("r" + name + "_scalar", [(10,)], attrs={"scalar": 0.5}, grad=False) for name in ["greater_equal", "greater"]]
CASES += [Case("cast", [(5, 6)], attrs={"dtype": "int32"}, grad=False), Case("cast", [(5, 6)], attrs={"dtype": "float64"}),
          Case("cast", [(4,)], "int32", attrs={"dtype": "float32"}, grad=False),
          Case("cast", [(4, 2)], attrs={"dtype": "bool"}, grad=False)]
# exp and sigmoid across float32's whole range: overflow to inf, underflow to 0
CASES += [Case("exp", [(257,)], low=-110.0, high=110.0, grad=False),
          Case("sigmoid", [(257,)], low=-110.0, high=110.0, grad=False)]
# relu's gradient from its output: its own gradient reaches g only (y is a mask)
CASES += [Case("relu_grad", [(17, 33), (17, 33)], grad_inputs=(0,)), Case("relu_grad", [(3, 1, 5), (4, 1)], grad_inputs=(0,)),
          Case("relu_grad", [(2, 3, 5), (2, 3, 5)], "float64", grad_inputs=(0,))]
