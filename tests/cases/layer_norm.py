"""Layer normalization and its one-kernel gradient."""
from helpers import Case, random_array


def _far_rows(rng, shapes, dtypes):
    """gy, x and weight for the gradient: rows of x about 10 from zero, gy and weight about 1."""
    lows = [(-2.0, 2.0), (8.0, 12.0), (-2.0, 2.0)]
    return [random_array(rng, s, d, *lows[k]) for k, (s, d) in enumerate(zip(shapes, dtypes))]


CASES = [
    Case("layer_norm", [(6, 16), (16,), (16,)]),
    Case("layer_norm", [(4, 3, 8), (3, 8), (3, 8)], attrs={"axis": 1, "eps": 1e-3}),
    Case("layer_norm", [(2, 3, 5), (3, 5), (3, 5)], "float64", attrs={"axis": -2}),
    Case("layer_norm", [(3, 12), (12,), (12,)], "float64"),
    Case("layer_norm", [(5, 7), (5, 7), (5, 7)], attrs={"axis": 0}),  # one row: the whole tensor
    Case("layer_norm", [(4, 6), (6,), (6,)], ["float32", "float64", "float64"], grad=False),
    # rows of a transformer's width, far from zero: the variance of the centered values keeps their digits
    Case("layer_norm", [(16, 768), (768,), (768,)], low=8.0, high=12.0, grad=False),
    Case("layer_norm", [(3, 4096), (4096,), (4096,)], low=9.0, high=11.0, grad=False),
    Case("layer_norm_grad", [(6, 16), (6, 16), (16,)], grad=False),
    Case("layer_norm_grad", [(2, 4, 8), (2, 4, 8), (4, 8)], attrs={"axis": 1}, grad=False),
    Case("layer_norm_grad", [(3, 5), (3, 5), (5,)], "float64", grad=False),
    Case("layer_norm_grad", [(4, 6), (4, 6), (4, 6)], "float64", attrs={"axis": 0}, grad=False),
    Case("layer_norm_grad", [(64, 768), (64, 768), (768,)], make=_far_rows, grad=False),
]
