"""``graph.products``: a sum of matrix products (a recurrent weight's
gradient over its steps) joins into one product over the joined K axes,
giving the same sum; a weight many products read transposed is laid out
transposed once."""
import numpy as np

from kiln.graph import trace
from kiln.graph.products import join_products, transpose_once
from kiln.te import call


def _ops(graph) -> list[str]:
    return [n.op.name for n in graph.nodes]


def _run(graph, *inputs):
    """The graph's outputs, each node run by its own kernel."""
    from kiln.graph.fold import evaluate

    values = {id(v): a for v, a in zip(graph.inputs, inputs)}
    for node in graph.nodes:
        arrays = [v.data if v.is_const else values[id(v)] for v in node.inputs]
        values[id(node.outputs[0])] = evaluate(node.op.name, *arrays, **node.attrs)
    return [values[id(v)] for v in graph.outputs]


def test_a_sum_of_products_joins_into_one_product_over_k():
    """A recurrent weight's gradient, sum_t h_t^T g_t: one product of the joined operands, same sum."""
    def grads(h, g):
        total = call("matmul", h[0], g[0], transpose_a=True)
        for t in range(1, 6):
            total = total + call("matmul", h[t], g[t], transpose_a=True)
        return total + g[0][:1]  # a leaf that is not a product stays a term of the sum

    rng = np.random.default_rng(7)
    h, g = rng.standard_normal((6, 4, 8)).astype("float32"), rng.standard_normal((6, 4, 8)).astype("float32")
    graph = trace(grads, (h, g), dynamic_batch=False)
    want = _run(graph, h, g)[0]
    assert _ops(graph).count("matmul") == 6
    assert join_products(graph) == 1
    assert _ops(graph).count("matmul") == 1 and _ops(graph).count("concatenate") == 2
    np.testing.assert_allclose(_run(graph, h, g)[0], want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(want, np.einsum("tki,tkj->ij", h, g) + g[0][:1], rtol=1e-4, atol=1e-4)


def test_a_weight_many_products_read_transposed_is_transposed_once():
    def states(g, w):
        return [call("matmul", g[t], w, transpose_b=True) for t in range(5)]

    rng = np.random.default_rng(8)
    g, w = rng.standard_normal((5, 3, 8)).astype("float32"), rng.standard_normal((4, 8)).astype("float32")
    graph = trace(states, (g, w), dynamic_batch=False)
    want = _run(graph, g, w)
    assert transpose_once(graph) == 1
    products = [n for n in graph.nodes if n.op.name == "matmul"]
    assert len(products) == 5 and not any(n.attrs["transpose_b"] for n in products)
    assert _ops(graph).count("transpose") == 1
    for got, expected in zip(_run(graph, g, w), want):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
