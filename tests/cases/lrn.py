from helpers import Case

CASES = [
    Case("lrn", [(2, 7, 4, 5)], attrs={"size": 3}),
    Case("lrn", [(1, 5, 3, 3)], "float64", attrs={"size": 5, "alpha": 0.3, "beta": 0.6, "bias": 2.0}),
    Case("lrn", [(2, 3, 5, 2)], "float64", attrs={"size": 7, "alpha": 0.5, "beta": 1.25, "bias": 1.5}),  # wider than C
    Case("lrn", [(1, 6, 7)], "float64", attrs={"size": 1, "alpha": 0.8, "beta": 0.5}),
    Case("lrn", [(3, 9)], attrs={"size": 5, "alpha": 0.2}),
    Case("lrn", [(1, 4, 2, 3, 2)], attrs={"size": 3, "alpha": 0.1, "beta": 0.75, "bias": 0.5}),
    # AlexNet's second normalization
    Case("lrn", [(2, 96, 27, 27)], attrs={"size": 5, "alpha": 1e-4, "beta": 0.75, "bias": 2.0}, grad=False),
]
