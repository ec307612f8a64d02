"""Op traits (te/registry.py): what the graph passes and the measurements
know about an op is declared on the op, and the passes read it there instead
of testing op names."""
import ast
from pathlib import Path

import pytest

from kiln.te import get_op, list_ops
from kiln.te.registry import Op

#: each trait and the ops that have it, with the value where it is not a flag:
#: the sets the passes' name tables named before the traits replaced them
EXPECTED = {
    "commutative": {"add", "multiply", "maximum", "equal"},
    "view": {"reshape"},
    "relu_attr": {"dense", "dense_packed", "dense_int8", "conv2d_int8", "depthwise_conv2d_int8"},
    "channel_blocked": {"conv2d_packed", "conv2d_winograd", "depthwise_conv2d_packed", "conv2d_int8",
                        "depthwise_conv2d_int8"},
    "pools_blocked": {"global_avg_pool2d"},
    "passes_blocks": {"max_pool2d"},
    "quantized_input": {"conv2d_int8", "depthwise_conv2d_int8"},
    "saturates": {"quantize"},
    "image_block_tasks": {"conv2d_winograd"},
    "in_task_prologue": {"conv2d_packed"},
    "affine_operands": {"add": (0, 1), "subtract": (0, 1), "multiply": (0, 1), "divide": (0,)},
    "fold_weight_axis": {"conv2d": 0, "dense": 1},
    "affine_output": {"conv2d_int8": (2, 3), "dense_int8": (2, 3), "depthwise_conv2d_int8": (2, 3)},
    "permutes_axes": {"transpose"},
    "transposed_operands": {"matmul"},
    "dense_layer": {"dense"},
    "normalizes_rows": {"softmax"},
    "sums_operands": {"add"},
    # the ops of the families runtime.measure scored in GFLOPS (matmul, conv2d, conv2d_backward_weight)
    "compute_bound": {"attention", "matmul", "dense", "dense_packed", "dense_int8", "matmul_int8", "conv2d_int8",
                      "depthwise_conv2d_int8", "conv2d", "conv2d_packed", "conv2d_backward_data",
                      "conv2d_backward_weight"},
}

KILN = Path(__file__).resolve().parents[1]


def _having(trait: str):
    """The registered ops whose ``trait`` differs from ``Op``'s default: a set
    of names for a flag, else ``{name: value}``."""
    default = getattr(Op, trait)
    found = {name: getattr(get_op(name), trait) for name in list_ops() if getattr(get_op(name), trait) != default}
    return set(found) if isinstance(default, bool) else found


@pytest.mark.parametrize("trait", sorted(EXPECTED))
def test_trait_is_declared_on_exactly_its_ops(trait):
    assert _having(trait) == EXPECTED[trait]


def _op_name_tests(source: str) -> list[str]:
    """Where ``source`` tests a value against registered op names: a
    comparison (``==``, ``!=``, ``in``, ``not in``) with an op name written
    out, or with a module-level constant holding op names."""
    ops = set(list_ops())
    tree = ast.parse(source)

    def names_ops(node) -> bool:
        items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
        return any(isinstance(e, ast.Constant) and e.value in ops for e in items)

    tables = {t.id for stmt in tree.body if isinstance(stmt, ast.Assign) and names_ops(stmt.value)
              for t in stmt.targets if isinstance(t, ast.Name)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(isinstance(o, (ast.Eq, ast.NotEq, ast.In, ast.NotIn))
                                                 for o in node.ops):
            sides = [node.left, *node.comparators]
            if any(names_ops(s) or (isinstance(s, ast.Name) and s.id in tables) for s in sides):
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_scan_finds_op_name_tests():
    source = ('POOL = "global_avg_pool2d"\nCONVS = ("conv2d_packed", "conv2d_winograd")\n'
              'a = node.op.name in ("add", "multiply")\nb = user.op.name != POOL\nc = node.op.name in CONVS\n'
              'd = node.attrs["layout"] == "NCHW"\ne = node.op.commutative\n')
    assert [f.split(":")[0] for f in _op_name_tests(source)] == ["line 3", "line 4", "line 5"]


@pytest.mark.parametrize("path", sorted(str(p.relative_to(KILN)) for p in (KILN / "graph").glob("*.py"))
                         + ["runtime/measure.py", "autotune/plot.py"])
def test_passes_read_traits_not_op_names(path):
    assert _op_name_tests((KILN / path).read_text()) == []
