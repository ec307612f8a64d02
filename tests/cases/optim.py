"""The fused optimizer updates: the weight, its gradient, its state buffers,
and the hyperparameter vector (positive values, Adam's bias corrections in
(0, 1], so the references stay finite)."""
import numpy as np
from helpers import Case


def _hyper(values):
    def make(rng, shapes, dtypes):
        tensors = [rng.uniform(-2.0, 2.0, s).astype(d) for s, d in zip(shapes[:-1], dtypes[:-1])]
        if len(shapes) == 5:  # Adam's v is a running mean of squares: never negative
            tensors[3] = abs(tensors[3])
        return tensors + [np.asarray(values, dtypes[-1])]
    return make


SGD = _hyper([0.1, 0.01])
MOMENTUM = _hyper([0.1, 0.01, 0.9, 0.1, 0.9])
ADAM = _hyper([0.1, 0.01, 0.9, 0.999, 1e-8, 0.19, 0.002])
CASES = [
    Case("sgd_step", [(33, 17), (33, 17), (2,)], make=SGD, grad=False),
    Case("sgd_step", [(5,), (5,), (2,)], "float64", make=SGD, grad=False),
    Case("sgd_step", [(), (), (2,)], make=SGD, grad=False),
    Case("sgd_momentum_step", [(64, 3, 3, 3)] * 3 + [(5,)], make=MOMENTUM, grad=False),
    Case("sgd_momentum_step", [(1000,)] * 3 + [(5,)], attrs={"nesterov": True}, make=MOMENTUM, grad=False),
    Case("adam_step", [(129, 7)] * 4 + [(7,)], make=ADAM, grad=False),
    Case("adam_step", [(10,)] * 4 + [(7,)], "float64", make=ADAM, grad=False),
]
