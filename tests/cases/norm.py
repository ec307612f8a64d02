"""Training-mode batch normalization and its one-kernel gradient."""
from helpers import Case

CASES = [
    Case("batch_norm_train", [(6, 3, 4, 5), (3,), (3,)]),
    Case("batch_norm_train", [(7, 4), (4,), (4,)], attrs={"eps": 1e-3}),
    Case("batch_norm_train", [(2, 3, 5), (3,), (3,)], "float64"),
    Case("batch_norm_train_grad", [(6, 3, 4, 5), (6, 3, 4, 5), (3,), (3,), (3,)], grad=False),
    Case("batch_norm_train_grad", [(9, 2), (9, 2), (2,), (2,), (2,)], "float64", grad=False),
]
