"""The graph layer: tracing, each export pass on the graph before and after,
numerics equal to the model's eval forward at batch 1, 7 and 64, and graphs
that defeat a pass still exporting correctly."""
import re

import numpy as np
import pytest

import kiln
from kiln import nn
from kiln.graph import optimize, trace
from kiln.graph.fold import fold_affine
from kiln.graph.fuse import fuse_epilogues
from kiln.graph.implement import implement
from kiln.runtime import Predictor

from helpers import bn_stats as _stats, exported_matches as _exported_matches, node_names as _ops


class Twice(nn.Module):
    """A conv whose output feeds a BatchNorm and the output both."""

    def __init__(self):
        self.conv, self.bn = nn.Conv(1, 4, 3), nn.BatchNorm2d(4)

    def forward(self, x):
        y = self.conv(x)
        return self.bn(y) + y


class AddInput(nn.Module):
    """A residual whose other operand is the graph input."""

    def __init__(self):
        self.conv = nn.Conv(2, 2, 3)

    def forward(self, x):
        return nn.ReLU()(self.conv(x) + x)


@pytest.fixture
def images():
    return np.random.default_rng(0).standard_normal((64, 1, 8, 8)).astype("float32")


def test_batchnorm_folds_into_the_conv_and_the_rest_fuses(images, tmp_path):
    nn.init.manual_seed(0)
    model = _stats(nn.Sequential(nn.Conv(1, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.GlobalAvgPool2d(),
                                 nn.Linear(8, 10)), images)
    graph = trace(model, images[:1])
    assert _ops(graph) == ["conv2d", "add", "subtract", "multiply", "add", "relu", "global_avg_pool2d", "reshape",
                           "dense"]
    assert fold_affine(graph) == 1
    assert _ops(graph) == ["conv2d", "add", "relu", "global_avg_pool2d", "reshape", "dense"]
    assert fuse_epilogues(graph) == 2
    assert _ops(graph) == ["conv2d_add_relu", "global_avg_pool2d", "reshape", "dense"]
    assert implement(graph, kiln.cpu()) == 2
    assert _ops(graph) == ["conv2d_packed_add_relu", "global_avg_pool2d", "reshape", "dense_packed"]
    _exported_matches(model, images, tmp_path)


def test_dense_takes_its_relu_and_a_following_affine_folds(tmp_path):
    nn.init.manual_seed(1)
    x = np.random.default_rng(1).standard_normal((64, 16)).astype("float32")
    model = _stats(nn.Sequential(nn.Linear(16, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 4)), x)
    graph = optimize(trace(model, x[:1]))
    assert _ops(graph) == ["dense_packed", "dense_packed"] and graph.nodes[0].attrs["relu"]
    _exported_matches(model, x, tmp_path)


def test_a_value_used_twice_is_neither_folded_nor_fused_away(images, tmp_path):
    nn.init.manual_seed(2)
    model = _stats(Twice(), images)
    graph = optimize(trace(model, images[:1]))
    # the biased conv output is read twice: its bias fuses, the BatchNorm cannot fold into its weights
    assert _ops(graph) == ["conv2d_packed_add", "subtract_multiply_add_add"]
    _exported_matches(model, images, tmp_path)


def test_a_residual_of_the_graph_input_fuses_as_an_epilogue(tmp_path):
    nn.init.manual_seed(3)
    x = np.random.default_rng(3).standard_normal((64, 2, 8, 8)).astype("float32")
    model = AddInput().eval()
    graph = optimize(trace(model, x[:1]))
    assert _ops(graph) == ["conv2d_packed_add_add_relu"]  # bias, residual and relu in the conv's write-back
    _exported_matches(model, x, tmp_path)


def test_a_batchnorm_with_no_conv_before_it_still_exports(images, tmp_path):
    nn.init.manual_seed(4)
    model = _stats(nn.Sequential(nn.BatchNorm2d(1), nn.ReLU(), nn.Flatten(), nn.Linear(64, 3)), images)
    graph = optimize(trace(model, images[:1]))
    assert graph.nodes[0].name == "subtract_multiply_add_relu"  # nothing to fold into: one fused kernel
    _exported_matches(model, images, tmp_path)


@pytest.mark.parametrize("batch", [1, 8, 9, 32, 33])
def test_every_entry_computes_what_main_computes(tmp_path, batch):
    """Batches of 1-8 run ``main_small``, of 9-32 ``main_some`` (kernels
    scheduled for so few rows), larger ones ``main``: all agree."""
    import tvm

    from kiln.graph.entries import ENTRIES

    nn.init.manual_seed(5)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).eval()
    predictor = Predictor(kiln.export(model, np.zeros((1, 16), "float32"), tmp_path / "m.so"))
    assert predictor.meta["entries"] == [{"name": "main_small", "max_batch": 8}, {"name": "main_some", "max_batch": 32},
                                         {"name": "main"}] == [{"name": n, **({"max_batch": b} if b else {})}
                                                               for n, b, _ in ENTRIES]
    x = np.random.default_rng(5).standard_normal((batch, 16)).astype("float32")
    want = predictor.vm["main"](tvm.runtime.tensor(x)).numpy()
    for name, _, _ in ENTRIES:
        np.testing.assert_allclose(predictor.vm[name](tvm.runtime.tensor(x)).numpy(), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(predictor(x), model(kiln.Tensor(x)).numpy(), rtol=1e-5, atol=1e-6)


def test_the_trace_names_every_node_and_constant(images):
    graph = trace(nn.Sequential(nn.Conv(1, 2, 3), nn.ReLU()).eval(), images[:1])
    text = repr(graph)
    assert "conv2d" in text and "relu" in text and "return" in text
    assert len(graph.constants()) == 2  # the weight and the bias


def test_an_op_with_no_export_rule_is_an_export_error_naming_it(tmp_path):
    model = nn.Sequential(nn.Linear(4, 4))
    with pytest.raises(kiln.errors.ExportError, match="op 'masked_select'"):
        kiln.export(lambda x: model(x).masked_select(x > 0), np.zeros((1, 4), "float32"), tmp_path / "m.so")
    assert not (tmp_path / "m.so").exists()


@pytest.mark.parametrize("entry", [0, 1, 2], ids=["main_small", "main_some", "main"])
def test_exported_kernels_have_no_pack_stage(entry):
    """Constant weights are packed at export: in every conv and dense kernel
    the only block reading the packed weight (5-D blocks of channels, 3-D
    panels) is the multiply-accumulate; nothing copies it per call."""
    import tvm

    from kiln.graph.entries import ENTRIES
    from kiln.graph.lower import schedule_kernels, to_relax
    from kiln.schedules.util import blocks

    nn.init.manual_seed(6)
    model = nn.Sequential(nn.Conv(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(256, 40), nn.ReLU(),
                          nn.Linear(40, 4)).eval()
    graph = optimize(trace(model, np.zeros((1, 1, 8, 8), "float32")), kiln.cpu())
    mod, kernels = to_relax(graph)
    mod = schedule_kernels(mod, kernels, kiln.cpu(), ENTRIES[entry][2])
    assert sorted(n.op.name for n in kernels.values()) == ["conv2d_packed", "dense_packed", "dense_packed"]
    for name in kernels:
        sch = tvm.s_tir.Schedule(mod[name])
        found = [sch.get(b) for b in blocks(sch)]
        written = {str(w.source.name) for b in found for w in b.writes}
        weights = {str(r.source.name) for b in found for r in b.reads
                   if len(r.source.shape) in (3, 5) and str(r.source.name) not in written}  # inputs only
        assert len(weights) == 1, (name, weights)
        readers = [b.name_hint for b in found for r in b.reads if str(r.source.name) in weights]
        assert len(readers) == 1 and readers[0].endswith("_update"), (name, readers)


def test_every_exported_kernel_keeps_its_noalias_aligned_inner_function():
    """The VM's shape function must not cost the kernels their ``noalias``
    (without it LLVM cannot keep a register tile in registers: 2-3x slower),
    nor the kernels reading intermediate values their 64-byte alignment."""
    from kiln.graph.lower import build_module
    from kiln.graph.module import compile_module

    model = nn.Sequential(nn.Linear(16, 40), nn.ReLU(), nn.Linear(40, 4)).eval()
    graph = optimize(trace(model, np.zeros((1, 16), "float32")), kiln.cpu())
    executable = compile_module(build_module(graph, {}, kiln.cpu()), kiln.cpu())
    source = executable.mod.imports[0].inspect_source("ll")
    assert "@__tvm_ffi_shape_func" in source  # the module has the VM's shape function
    kernels = sorted(set(re.findall(r"define [^\n]*@(dense_packed_\d+(?:_small|_some)?)_compute_\(", source)))
    # both layers in every entry; an entry scheduling a kernel as another does shares it (graph/share.py)
    assert {k[:len("dense_packed_0")] for k in kernels} == {"dense_packed_0", "dense_packed_1"}, kernels
    for kernel in kernels:
        signature = re.search(rf"define [^\n]*@{kernel}_compute_\((.*)\)[^)]*\{{", source).group(1)
        pointers = signature.split(", ptr")[1:]
        assert pointers and all(p.startswith(" noalias") for p in pointers), kernel
        # the weights 64-byte aligned; the model's input (graph/align.py) only to its element size
        assert all("align 64" in p for p in pointers if "%x" not in p), kernel
        inputs = [p for p in pointers if "%x" in p]
        assert bool(inputs) == kernel.startswith("dense_packed_0") and all("align 4 " in p for p in inputs), kernel


def test_a_layer_too_small_per_row_runs_on_one_thread():
    """Threads follow the work of the rows an entry serves: the 784->512
    layer is parallel in ``main``, the 512->10 one (5K multiply-adds a row)
    is not; in ``main_some`` the same holds at 32 rows."""
    from kiln.graph.entries import ENTRIES
    from kiln.graph.lower import schedule_kernels, to_relax

    model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 10)).eval()
    graph = optimize(trace(model, np.zeros((1, 784), "float32")), kiln.cpu())
    for name, _, configure in ENTRIES[1:]:
        mod, kernels = to_relax(graph, name)
        mod = schedule_kernels(mod, kernels, kiln.cpu(), configure)
        big, small = (mod[k].script() for k in kernels)
        assert "T.parallel" in big and "T.parallel" not in small, name


def test_a_small_layer_moving_much_data_runs_on_every_thread():
    """The digits CNN's pooling (0.13M additions at 64 rows, below
    ``PARALLEL_WORK``) reads 524 KB at 64 rows: parallel in ``main``, as the
    convs before it are, so each core reads what it wrote; at 16 rows
    (``main_some``) it and the 1->16 channel conv stay on one thread. (Its
    convs direct: after a Winograd conv the pooling runs in the conv's tasks.)"""
    from kiln.graph.entries import ENTRIES
    from kiln.graph.lower import schedule_kernels, to_relax
    from kiln.nn.train import build_model

    model = build_model("cnn", (1, 8, 8), 10).eval()
    graph = optimize(trace(model, np.zeros((1, 1, 8, 8), "float32")), kiln.cpu(), winograd=False)
    for name, _, configure in ENTRIES[1:]:
        mod, kernels = to_relax(graph, name)
        mod = schedule_kernels(mod, kernels, kiln.cpu(), configure)
        parallel = {kernels[k].op.name + ("" if kernels[k].inputs[0] is not graph.inputs[0] else " (first)"):
                    "T.parallel" in mod[k].script() for k in kernels if kernels[k].op.name != "from_blocked"}
        many = name == "main"
        assert parallel == {"conv2d_packed (first)": many, "conv2d_packed": True, "global_avg_pool2d": many,
                            "dense_packed": False}, name


def test_the_kernels_reading_the_input_are_found_through_views_and_repeats():
    """``graph.align.input_params``: a flatten is a view of the input (the
    dense after it reads the input), and an input a kernel takes twice (the
    conv's input and its residual) is two parameters, both relaxed."""
    from kiln.graph.align import input_params, unaligned
    from kiln.graph.lower import to_relax

    flat = nn.Sequential(nn.Flatten(), nn.Linear(64, 8), nn.ReLU(), nn.Linear(8, 3)).eval()
    mod, _ = to_relax(optimize(trace(flat, np.zeros((1, 1, 8, 8), "float32")), kiln.cpu()))
    found = input_params(mod["main"])
    assert list(found.values()) == [[0]] and next(iter(found)).startswith("dense")  # the second dense reads no input
    mod, _ = to_relax(optimize(trace(AddInput().eval(), np.zeros((1, 2, 8, 8), "float32")), kiln.cpu()))
    ((kernel, params),) = input_params(mod["main"]).items()
    assert params == [0, 3]  # x, the folded weight and bias, x again (the residual), then the output
    relaxed = unaligned(mod[kernel], params)
    assert [p.data_alignment for p in relaxed.params] == [4, 64, 64, 4, 64]


@pytest.mark.parametrize("update_between", [False, True])
def test_a_producer_is_not_moved_past_an_update_of_what_it_reads(update_between):
    """A fused pair takes the consumer's place; where an in-place update
    (an optimizer step) between the two overwrites an input the producer
    reads, moving it would read the new value: such a pair is not fused."""
    from kiln.graph.ir import Graph, Value
    from kiln.te import get_op

    graph = Graph()
    x, w, g, h = (Value((4, 8), "float32", name="x"), Value((4, 8), "float32", name="w"),
                  Value((4, 8), "float32", name="g"), Value((2,), "float32", name="h"))
    graph.inputs = [x, w, g, h]
    product = graph.add(get_op("multiply"), {}, [x, w], [((4, 8), "float32")])
    if update_between:
        step = graph.add(get_op("sgd_step"), {}, [w, g, h], [((4, 8), "float32")])
        step.inplace = True
    relu = graph.add(get_op("relu"), {}, [product.outputs[0]], [((4, 8), "float32")])
    graph.outputs = list(relu.outputs) + (list(step.outputs) if update_between else [])
    assert fuse_epilogues(graph) == (0 if update_between else 1)


def test_a_graph_built_op_by_op_exports_with_named_inputs_and_outputs(tmp_path):
    """A frontend's way: ``Graph.input``/``const``/``apply``/``output``, then
    ``optimize`` and ``build_library``; an int64 input, a symbolic batch
    shared by both inputs, a dict of outputs."""
    from tvm import tirx

    from kiln.graph import Graph, build_library

    rng = np.random.default_rng(7)
    table = rng.standard_normal((7, 4)).astype("float32")
    graph, batch = Graph(), tirx.Var("batch", "int64")
    ids, scale = graph.input("ids", (batch, 5), "int64"), graph.input("scale", (batch, 1), "float32")
    (hot,) = graph.apply("one_hot", [ids], {"num_classes": 7})
    (embedded,) = graph.apply("matmul", [hot, graph.const(table, "table")])
    (summed,) = graph.apply(kiln.te.get_op("sum"), [embedded], {"axis": 1})
    (scaled,) = graph.apply("multiply", [summed, scale])
    graph.output(scaled, "scaled")
    graph.output(embedded, "embedded")
    predictor = Predictor(build_library(optimize(graph), tmp_path / "g.so"))
    assert [tuple(s) for s in predictor.inputs] == [("ids", (None, 5), "int64"), ("scale", (None, 1), "float32")]
    for n in (1, 9):
        x, s = rng.integers(0, 7, (n, 5)), rng.standard_normal((n, 1)).astype("float32")
        got = predictor(ids=x, scale=s)
        np.testing.assert_allclose(got["embedded"], table[x], rtol=1e-6)
        np.testing.assert_allclose(got["scaled"], table[x].sum(axis=1) * s, rtol=1e-5, atol=1e-6)


def test_graph_apply_checks_every_application_before_adding_it():
    from kiln.errors import AttrError, DTypeError, ExportError, OpNotFoundError, ShapeError
    from kiln.graph import Graph
    from kiln.graph.ir import Value

    graph = Graph()
    x, mask = graph.input("x", (2, 3), "float32"), graph.input("mask", (2, 3), "bool")
    weight = graph.const(np.ones((4, 5), "float32"))
    cases = [(lambda: graph.apply("matmul", [x, weight]), ShapeError, "matmul", "inner dims 3 and 4 differ"),
             (lambda: graph.apply("sum", [x], {"axis": 5}), ShapeError, "sum", "out of range"),
             (lambda: graph.apply("sum", [x], {"bogus": 1}), AttrError, "sum", "unknown attribute"),
             (lambda: graph.apply("one_hot", [x], {"num_classes": 3}), DTypeError, "one_hot", "int32, int64"),
             (lambda: graph.apply("relu", [x, x]), ShapeError, "relu", "expected 1"),
             (lambda: graph.apply("relu", [np.ones(3)]), ShapeError, "relu", "a value of this graph"),
             (lambda: graph.apply("relu", [Value((2, 3), "float32", name="stray")]), ShapeError, "relu",
              "a value of this graph"),
             (lambda: graph.apply("masked_select", [x, mask]), ExportError, "masked_select", "depends on the data"),
             (lambda: graph.apply("no_such_op", [x]), OpNotFoundError, "no_such_op", "kiln ops")]
    for call, error, op, needle in cases:
        with pytest.raises(error, match=needle) as info:
            call()
        assert info.value.op == op
    assert graph.nodes == []
    for call, error, arg in [(lambda: graph.input("x", (1,), "float32"), ShapeError, "name"),
                             (lambda: graph.input("2x", (1,), "float32"), ShapeError, "name"),
                             (lambda: graph.input("y", (2, -1), "float32"), ShapeError, "shape"),
                             (lambda: graph.input("y", (2,), "float16"), DTypeError, "dtype"),
                             (lambda: graph.const(np.ones(2, "float16")), DTypeError, "array"),
                             (lambda: graph.output(x, ""), ShapeError, "name")]:
        with pytest.raises(error) as info:
            call()
        assert info.value.arg == arg and info.value.where.startswith("Graph.")
    assert [v.name for v in graph.inputs] == ["x", "mask"]


def test_build_library_refuses_inputs_that_are_not_one_batch(tmp_path):
    from tvm import tirx

    from kiln.graph import Graph, build_library

    for first, second, needle in [((tirx.Var("n", "int64"), 3), (tirx.Var("m", "int64"), 3), "the same variable"),
                                  ((2, tirx.Var("s", "int64")), (2, tirx.Var("t", "int64")), "the same variable"),
                                  ((2, 3, tirx.Var("n", "int64")), (2, 3, 3), "second .the sequence. alone")]:
        graph = Graph()
        a, b = graph.input("a", first, "float32"), graph.input("b", second, "float32")
        graph.output(graph.apply("relu", [a])[0])
        graph.output(graph.apply("relu", [b])[0])
        with pytest.raises(kiln.errors.ExportError, match=needle) as info:
            build_library(graph, tmp_path / "g.so")
        assert info.value.where == "build_library" and info.value.arg == "graph"
    graph = Graph()
    graph.output(graph.apply("relu", [graph.input("out", (2,), "float32")])[0])
    with pytest.raises(kiln.errors.ExportError, match="other than 'out'"):
        build_library(graph, tmp_path / "g.so")
    assert not (tmp_path / "g.so").exists()


def test_an_elementwise_op_after_a_reshape_joins_the_dense_before_it(tmp_path):
    """A transformer's feed-forward layer as PyTorch exports it: the dense
    layer on ``(batch * 8, 16)`` rows, a view back to ``(batch, 8, 32)``, then
    GELU and a residual add. The reshape moves after them (graph/fuse.py), so
    both join the dense layer's write-back, and the export still matches."""
    torch = pytest.importorskip("torch", reason="the PyTorch frontend needs torch")
    from kiln.frontend import from_torch
    from kiln.graph.export import inference_graph

    class FeedForward(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(16, 32)

        def forward(self, x, residual):
            return torch.nn.functional.gelu(self.fc(x)) + residual

    torch.manual_seed(0)
    net = FeedForward().eval()
    x, r = torch.randn(3, 8, 16), torch.randn(3, 8, 32)
    imported = from_torch(net, (x[:2], r[:2]))
    example = {"x": x[:1].numpy(), "residual": r[:1].numpy()}
    kernels = [n.name for n in inference_graph(imported, example, kiln.cpu()).nodes if not n.op.view]
    assert kernels == ["dense_packed_gelu_add"], kernels
    predictor = Predictor(kiln.export(imported, example, tmp_path / "ff.so", batches=()))
    with torch.no_grad():
        for batch in (1, 3):
            np.testing.assert_allclose(predictor(x[:batch].numpy(), r[:batch].numpy()),
                                       net(x[:batch], r[:batch]).numpy(), rtol=1e-5, atol=1e-5)
