"""Replayed Predictor calls (``runtime/replay.py``): the first call at a
batch size records the kernels the VM runs, later calls replay them and give
exactly what the VM gives; a call a replay would not reproduce stays on the VM."""
import numpy as np
import pytest
import tvm
from tvm import relax, te

import kiln
from kiln import nn
from kiln.graph.module import compile_module
from kiln.nn.train import build_model
from kiln.runtime import Predictor
from kiln.runtime.device import as_target
from kiln.runtime.metadata import choose_entry
from kiln.runtime.predictor import MAX_PLANS
from kiln.runtime.replay import PACK_ALIGN, Replay, _place, record


@pytest.fixture(scope="module", params=["mlp", "cnn"])
def zoo(request, tmp_path_factory):
    """(model in eval mode, its export): the MLP reads its input through a
    reshape (Flatten), the CNN whole."""
    nn.init.manual_seed(0)
    model = build_model(request.param, (1, 8, 8), 10)
    path = kiln.export(model, np.zeros((1, 1, 8, 8), "float32"), tmp_path_factory.mktemp("m") / "model.so")
    model.eval()
    return model, path


def images(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 1, 8, 8)).astype("float32")


def test_later_calls_replay_the_recorded_kernels_and_give_the_vms_answer(zoo):
    model, path = zoo
    predictor = Predictor(path)
    for n in (1, 5, 16, 40):  # entries for small, some and any batches
        xs = [images(n, seed) for seed in range(3)]
        got = [predictor(x) for x in xs]
        assert isinstance(predictor._plans[(xs[0].shape,)], Replay)
        vm = predictor._funcs[choose_entry(predictor._entries, n)]
        for x, y in zip(xs, got):
            np.testing.assert_array_equal(y, vm(predictor._argument(x)).numpy())  # the same kernels, bit for bit
            np.testing.assert_allclose(y, model(kiln.Tensor(x)).numpy(), rtol=1e-4, atol=1e-4)
        assert not np.shares_memory(got[1], got[2])  # each call's result is the caller's
        out = np.empty_like(got[0])
        assert predictor(xs[0], out=out) is out
        np.testing.assert_array_equal(out, got[0])


def test_a_predictor_keeps_the_plans_of_its_latest_batch_sizes(zoo):
    model, path = zoo
    predictor = Predictor(path)
    sizes = list(range(1, MAX_PLANS + 3))
    for n in sizes:
        predictor(images(n, 0))
    assert list(predictor._plans) == [(images(n, 0).shape,) for n in sizes[-MAX_PLANS:]]
    x = images(1, 7)  # recorded again, then replayed
    first, again = predictor(x), predictor(x)
    np.testing.assert_array_equal(first, again)
    np.testing.assert_allclose(first, model(kiln.Tensor(x)).numpy(), rtol=1e-4, atol=1e-4)


def test_a_model_returning_its_input_stays_on_the_vm(tmp_path):
    predictor = Predictor(kiln.export(nn.Sequential(), np.zeros((1, 16), "float32"), tmp_path / "id.so"))
    x = np.ones((4, 16), "float32")
    for _ in range(2):
        np.testing.assert_array_equal(predictor(x), x)
    assert predictor._plans == {(x.shape,): None}


def test_a_call_with_other_work_than_kernels_is_not_recorded():
    tvm.register_global_func("kiln.test.echo", lambda a: a, override=True)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([4], "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            doubled = bb.emit_output(bb.emit_te(lambda a: te.compute((4,), lambda i: a[i] * 2.0, name="d"), x))
        bb.emit_func_output(bb.emit(relax.call_pure_packed("kiln.test.echo", doubled,
                                                           ty_args=relax.TensorType([4], "float32"))))
    executable = compile_module(bb.get(), as_target(None))
    arg = tvm.runtime.tensor(np.arange(4, dtype="float32"))
    result, plan = record(relax.VirtualMachine(executable, tvm.cpu()), "main", executable.mod.imports[0], [arg])
    np.testing.assert_array_equal(result.numpy(), [0, 2, 4, 6])
    assert plan is None  # a packed call the recorder does not know might do anything


def test_a_replay_packs_its_buffers_by_their_lives(tmp_path):
    nn.init.manual_seed(0)
    widths = [8, 64, 32, 48, 16, 10]  # intermediates of distinct sizes: the export's plan keeps each apart
    layers = []
    for a, b in zip(widths, widths[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    model = nn.Sequential(*layers[:-1])
    x = np.random.default_rng(0).standard_normal((40, 8)).astype("float32")
    predictor = Predictor(kiln.export(model, x[:1], tmp_path / "model.so"))
    predictor(x)
    packed, apart = predictor._plans[(x.shape,)].memory
    assert 0 < packed < apart  # the first layer's output and the third's share memory
    model.eval()
    for seed in range(2):
        x = np.random.default_rng(seed).standard_normal((40, 8)).astype("float32")
        np.testing.assert_allclose(predictor(x), model(kiln.Tensor(x)).numpy(), rtol=1e-4, atol=1e-4)


def test_placing_regions_shares_memory_only_between_lives_that_do_not_cross():
    # [start, end, first step, last step]: a lives in steps 0-1, b in 1-2, c in 2-3, d in 3-4
    regions = [[0, 1000, 0, 1], [5000, 5100, 1, 2], [9000, 9500, 2, 3], [20000, 21000, 3, 4]]
    offsets, end = _place(regions)
    for k, (s, e, first, last) in enumerate(regions):
        assert offsets[k] % PACK_ALIGN == 0
        for q, (s2, e2, first2, last2) in enumerate(regions[:k]):
            if first <= last2 and first2 <= last:  # live together: apart in the arena
                assert offsets[k] + e - s <= offsets[q] or offsets[q] + e2 - s2 <= offsets[k]
    assert offsets == [0, 1536, 1024, 0] and end == 1636  # d, a, c, b placed in turn; a and d share
