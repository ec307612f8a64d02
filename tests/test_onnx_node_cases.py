"""ONNX's own backend node tests through ``from_onnx``: for each op type kiln
claims, its first two node-test cases in kiln's dtypes pass, checked as
``benchmarks/onnx_node_tests.py`` checks the whole suite (which also counts
the refusals and runs TVM's frontend beside it). A case kiln refuses on
purpose (a reason listed below) is passed over for the next one, and its
refusal must name the node or input and say why."""
import importlib.util
import re
from pathlib import Path

import pytest

pytest.importorskip("onnx", reason="ONNX's node tests come with the onnx package")

from kiln.frontend import supported_onnx_ops  # noqa: E402

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "onnx_node_tests.py"
PER_OP, TRIES = 2, 16
KILN_DTYPES = {"float32", "float64", "int32", "int64", "bool", "uint8", "int8"}

#: refusals kiln means (a pattern of the message: why)
ACCEPTED = {
    r"training-mode": "training-mode Dropout and BatchNormalization are not inference",
    r"is not a tensor": "sequence and optional inputs",
    r"opset 1 is outside": "Not's node tests are written for opset 1, older than kiln reads",
    r"no product reduction": "ReduceProd of data needs a product reduction kernel",
    r"mode='cubic'|antialias|tf_crop_and_resize|half_pixel_symmetric": "modes resize2d does not have",
    r"interpolates at the ratio of the sizes": "resize2d takes sizes; a scale giving no whole size differs",
    r"a 3-D ": "3-D pooling and convolutions",
    r"per-tensor quantization of an activation": "Quantize/DequantizeLinear of data per axis: kiln's take one scale "
                                                 "(a constant weight's per-channel scales fold at import)",
}
#: claimed op types none of whose cases kiln passes, and why
NO_PASS = {"Not": "only opset-1 cases", "ReduceProd": "only of shapes, which the node tests do not do",
           # ONNX Runtime's contrib ops have no ONNX node tests: test_onnx_qoperator.py runs them against it
           **{f"com.microsoft.{op}": "a contrib op" for op in ("QGemm", "QLinearAdd", "QLinearMul", "QLinearGlobalAveragePool",
                                                                   "QLinearSoftmax", "QLinearSigmoid", "QLinearLeakyRelu")}}


def _bench():
    spec = importlib.util.spec_from_file_location("onnx_node_tests", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _in_kiln_dtypes(data_sets) -> bool:
    return all(str(a.dtype) in KILN_DTYPES for inputs, outputs in data_sets for a in (*inputs, *outputs))


def _by_op(bench) -> dict:
    """Claimed op type -> its first ``TRIES`` cases in kiln's dtypes, as (name, model, data sets);
    not the expanded forms of functions (the node tests of the ops they expand into)."""
    out: dict = {}
    claimed = set(supported_onnx_ops())
    for op, case in bench.claimed_cases():
        if op not in claimed or "_expanded" in case.name or len(out.setdefault(op, [])) >= TRIES:
            continue
        data_sets = bench.data_arrays(case.data_sets)
        if _in_kiln_dtypes(data_sets):
            out[op].append((case.name, case.model, data_sets))
    return out


def _clear_refusal(reason: str) -> bool:
    names = re.search(r"node '[^']+'|input '[^']+'|from_onnx", reason)
    return bool(names) and any(re.search(p, reason) for p in ACCEPTED)


@pytest.fixture(scope="module")
def outcomes():
    """Op type -> [(case name, status, reason)] until ``PER_OP`` passes or ``TRIES`` cases."""
    bench = _bench()
    result = {}
    for op, cases in _by_op(bench).items():
        result[op] = []
        for name, model, data_sets in cases:
            status, reason = bench.run_kiln(model, data_sets)
            result[op].append((name, status, reason))
            if sum(s == "pass" for _, s, _ in result[op]) == PER_OP or status != "pass" and \
                    not (status == "refused" and _clear_refusal(reason)):
                break
    return result


def test_first_node_cases_of_each_op_type_pass_or_are_refused_clearly(outcomes):
    bad = [f"{op} {name}: {status}: {reason}" for op, runs in outcomes.items() for name, status, reason in runs
           if status != "pass" and not (status == "refused" and _clear_refusal(reason))]
    total = sum(len(runs) for runs in outcomes.values())
    assert not bad, f"{len(bad)} of {total} cases:\n" + "\n".join(bad)


def test_every_claimed_op_type_passes_a_node_case(outcomes):
    passing = {op for op, runs in outcomes.items() if any(s == "pass" for _, s, _ in runs)}
    missing = set(supported_onnx_ops()) - passing - set(NO_PASS)
    assert not missing, f"claimed op types with no passing node test: {sorted(missing)}"


def test_an_unsupported_dtype_is_refused_naming_the_input():
    from onnx import TensorProto, helper
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    status, reason = _bench().run_kiln(model, [([], [])])
    assert status == "refused" and "input 'x'" in reason and "float16" in reason, reason


def test_an_axes_input_is_read_eagerly_and_refused_when_exported(tmp_path):
    # the node tests give axes, pads and shapes as model inputs: an eager call reads them; a trace cannot
    import numpy as np
    from onnx import TensorProto, helper

    import kiln
    from kiln.errors import FrontendError
    from kiln.frontend import from_onnx
    graph = helper.make_graph([helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
                               helper.make_tensor_value_info("axes", TensorProto.INT64, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None])])
    model = from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(model(x, np.array([1])).numpy(), x.sum(axis=1))
    np.testing.assert_array_equal(model(x, np.array([0])).numpy(), x.sum(axis=0))
    with pytest.raises(FrontendError, match=r"ReduceSum node 'ReduceSum_0': axes is computed from the data"):
        kiln.export(model, (x, np.array([1])), tmp_path / "m.kiln", dynamic_batch=False)
