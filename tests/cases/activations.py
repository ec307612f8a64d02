from helpers import Case, random_array


def _away_from(*kinks, low=-4.0, high=4.0, gap=0.05):
    """Float inputs in [low, high] at least ``gap`` from each kink, so central
    differences never straddle one."""

    def make(rng, shapes, dtypes):
        out = []
        for shape, dtype in zip(shapes, dtypes):
            x = random_array(rng, shape, "float64", low, high)
            for k in kinks:
                near = abs(x - k) < gap
                x[near] = k + gap * (1 + (x[near] >= k))
            out.append(x.astype(dtype))
        return out

    return make


def _with_nans(rng, shapes, dtypes):
    x = random_array(rng, shapes[0], dtypes[0], -4.0, 4.0)
    x.reshape(-1)[::7] = float("nan")
    return [x]


def _halves(rng, shapes, dtypes):
    """Multiples of 0.5, so round meets its ties (half to even)."""
    return [(rng.integers(-12, 13, shapes[0]) / 2).astype(dtypes[0])]


SMOOTH = {"erf": {}, "gelu": {}, "silu": {}, "softplus": {}, "sin": {}, "cos": {}}
KINKED = {  # op: (attrs, the inputs where its derivative jumps)
    "hardswish": ({}, (-3.0, 3.0)),
    "hardsigmoid": ({}, (-2.5, 2.5)),
    "leaky_relu": ({}, (0.0,)),
    "elu": ({}, (0.0,)),
    "clip": ({"min": -1.0, "max": 1.5}, (-1.0, 1.5)),
}

CASES = []
for name, attrs in SMOOTH.items():
    CASES += [Case(name, [(17, 33)], attrs=attrs, low=-4.0, high=4.0), Case(name, [(1,)], attrs=attrs),
              Case(name, [(2, 3, 5)], "float64", attrs=attrs, low=-4.0, high=4.0),
              Case(name, [(7, 9)], "int32", attrs=attrs, grad=False)]
for name, (attrs, kinks) in KINKED.items():
    CASES += [Case(name, [(17, 33)], attrs=attrs, make=_away_from(*kinks)),
              Case(name, [(2, 3, 5)], "float64", attrs=attrs, make=_away_from(*kinks)),
              Case(name, [(7, 9)], "int32", attrs=attrs, grad=False),
              Case(name, [(9, 7)], attrs=attrs, make=_with_nans, grad=False)]
# the attributes' other values
CASES += [
    Case("gelu", [(17, 33)], attrs={"approximate": "tanh"}, low=-4.0, high=4.0),
    Case("gelu", [(2, 3, 5)], "float64", attrs={"approximate": "tanh"}, low=-4.0, high=4.0),
    Case("hardsigmoid", [(6, 7)], attrs={"alpha": 1 / 6, "beta": 0.5}, make=_away_from(-3.0, 3.0)),
    Case("hardsigmoid", [(6, 7)], "float64", attrs={"alpha": -0.5, "beta": 0.25}, make=_away_from(-1.5, 0.5)),
    Case("leaky_relu", [(6, 7)], "float64", attrs={"alpha": 0.2}, make=_away_from(0.0)),
    Case("elu", [(6, 7)], "float64", attrs={"alpha": 0.5}, make=_away_from(0.0)),
    # a slope of 0: 0 * inf and 0 * NaN are NaN, which TVM's simplifier would fold to 0 (test_nan injects them)
    Case("hardsigmoid", [(3, 5)], attrs={"alpha": 0.0, "beta": 0.25}),
    Case("leaky_relu", [(3, 5)], attrs={"alpha": 0.0}, make=_away_from(0.0)),
    Case("elu", [(3, 5)], "float64", attrs={"alpha": 0.0}, make=_away_from(0.0)),
    Case("clip", [(6, 7)], "float64", attrs={"min": 0.0, "max": 6.0}, make=_away_from(0.0, 6.0, low=-2.0, high=8.0)),
    Case("clip", [(6, 7)], attrs={"min": 0.5}, make=_away_from(0.5)),
    Case("clip", [(6, 7)], "float64", attrs={"max": -0.5}, make=_away_from(-0.5)),
    Case("clip", [(6, 7)], attrs={}),
    Case("clip", [(5, 6)], "int32", attrs={"min": 0, "max": 6}, grad=False),  # stays int32
    Case("clip", [(5, 6)], "int64", attrs={"min": 0.5}, grad=False),  # a float bound: float64
    # beyond exp's range: no overflow
    Case("softplus", [(257,)], low=-110.0, high=110.0, grad=False),
    Case("silu", [(257,)], low=-110.0, high=110.0, grad=False),
    Case("elu", [(257,)], low=-110.0, high=110.0, grad=False),
    Case("erf", [(257,)], low=-8.0, high=8.0, grad=False),
    Case("erf", [(9, 7)], make=_with_nans, grad=False),
    Case("gelu", [(9, 7)], "float64", make=_with_nans, grad=False),
]
CASES += [Case("reciprocal", [(17, 33)], low=0.5), Case("reciprocal", [(2, 3, 5)], "float64", low=0.5),
          Case("reciprocal", [(4, 6)], "float64", low=-2.0, high=-0.5),
          Case("reciprocal", [(7, 9)], "int32", grad=False)]
for name in ["floor", "ceil", "round"]:
    CASES += [Case(name, [(17, 33)], low=-5.0, high=5.0), Case(name, [(2, 3, 5)], "float64", make=_halves),
              Case(name, [(6, 5)], make=_halves), Case(name, [(7, 9)], "int32"), Case(name, [(9, 7)], make=_with_nans)]
