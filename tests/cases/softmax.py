from helpers import Case


def _logits_and_labels(rng, shapes, dtypes):
    (n, c), _ = shapes
    return [rng.uniform(-3, 3, (n, c)).astype(dtypes[0]), rng.integers(0, c, n).astype(dtypes[1])]


def _labels(rng, shapes, dtypes):
    return [rng.integers(0, 5, shapes[0]).astype(dtypes[0])]


CASES = []
for name in ["softmax", "log_softmax"]:
    CASES += [Case(name, [(7, 13)]), Case(name, [(4, 5)], attrs={"axis": 0}), Case(name, [(2, 3, 6)], attrs={"axis": 1}),
              Case(name, [(1, 1)]), Case(name, [(3, 4)], "float64"), Case(name, [(64, 1000)], grad=False),
              Case(name, [(5, 9)], low=-80.0, high=80.0, grad=False)]
CASES += [
    Case("softmax_cross_entropy", [(8, 10), (8,)], ["float32", "int32"], make=_logits_and_labels, grad_inputs=(0,)),
    Case("softmax_cross_entropy", [(1, 3), (1,)], ["float64", "int64"], make=_logits_and_labels, grad_inputs=(0,)),
    Case("softmax_cross_entropy", [(128, 10), (128,)], ["float32", "int32"], make=_logits_and_labels, grad=False),
    Case("one_hot", [(6,)], "int32", attrs={"num_classes": 5}, make=_labels, grad=False),
    Case("one_hot", [(2, 3)], "int64", attrs={"num_classes": 5, "dtype": "float64"}, make=_labels, grad=False),
]
