"""The table-driven op test: every registered op, several shapes and dtypes —
``infer_shape``/``infer_dtype`` agree with the compiled kernel, the kernel
agrees with the numpy reference on every target (the CPU at each x86 vector
width, run where this host can; CUDA where a GPU is present), and
``gradient`` agrees with central differences (float64, its kernels on the
CPU at each width this host runs)."""
import pytest

import kiln
from kiln.te import get_op, list_ops

from cases import CASES
from devices import TARGETS, cpu_level  # noqa: F401 - a fixture
from helpers import NO_CUDA_TEMPLATE, check_forward, gradient_check, has_cuda_template

GRAD_CASES = [c for c in CASES if c.grad and get_op(c.op).differentiable]


def test_every_op_has_cases():
    covered = {c.op for c in CASES}
    assert set(list_ops()) - covered == set(), "ops with no test case"


def test_every_differentiable_op_has_gradient_cases():
    differentiable = {n for n in list_ops() if get_op(n).differentiable}
    assert differentiable - {c.op for c in GRAD_CASES} == set(), "differentiable ops never gradient-checked"


@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("target", TARGETS)
def test_forward_matches_numpy(target, case):
    if target.kind == "cuda" and not has_cuda_template(case.op):
        pytest.skip(NO_CUDA_TEMPLATE)
    check_forward(case, target=target)


@pytest.mark.parametrize("case", GRAD_CASES, ids=str)
def test_gradient_matches_central_differences(case, cpu_level):
    gradient_check(case)
