"""Exported models: one file, any batch size, equal to the model in eval mode,
loadable without the training code, and clear errors for bad files and inputs."""
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tvm
from tvm import te

import kiln
from kiln import nn
from kiln.errors import DTypeError, ExportError, ShapeError
from kiln.runtime import Predictor


def _mlp():
    nn.init.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Residual(nn.Sequential(nn.Linear(32, 32), nn.ReLU())),
                         nn.Linear(32, 10))


def _cnn():
    nn.init.manual_seed(0)
    return nn.Sequential(nn.Conv(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2), nn.Conv(4, 8, 3),
                         nn.ReLU(), nn.GlobalAvgPool2d(), nn.Linear(8, 10))


@pytest.mark.parametrize("make,shape", [(_mlp, (64,)), (_cnn, (1, 8, 8))], ids=["mlp", "cnn"])
def test_one_file_serves_every_batch_size(tmp_path, make, shape):
    model = make()
    x = np.random.default_rng(0).random((64,) + shape).astype("float32")
    model(kiln.Tensor(x))  # a training-mode pass moves BatchNorm's running statistics
    path = kiln.export(model, x[:1], tmp_path / "model.so")
    assert model.training, "export must restore the training mode"
    predictor = Predictor(path)
    model.eval()
    for batch in (1, 7, 64):
        np.testing.assert_allclose(predictor(x[:batch]), model(kiln.Tensor(x[:batch])).numpy(), atol=1e-5)


def test_predictor_runs_without_the_training_code(tmp_path):
    path = kiln.export(_mlp(), np.zeros((1, 64), "float32"), tmp_path / "model.so")
    script = textwrap.dedent(f"""
        import sys, numpy as np
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.startswith(("kiln.nn", "kiln.autotune")):
                    raise ImportError("blocked: " + name)
        sys.meta_path.insert(0, Block())
        from kiln.runtime import Predictor
        out = Predictor({str(path)!r})(np.ones((3, 64), "float32"))
        assert out.shape == (3, 10)
        assert not any(m.startswith(("kiln.nn", "kiln.autotune")) for m in sys.modules)
        print("ok")
    """)
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr


def test_bad_files_and_inputs_raise_clear_errors(tmp_path):
    path = kiln.export(_mlp(), np.zeros((2, 64), "float32"), tmp_path / "model.so")
    with pytest.raises(ExportError, match="no file"):
        Predictor(tmp_path / "missing.so")
    truncated = tmp_path / "truncated.so"
    truncated.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(ExportError, match="not a loadable module"):
        Predictor(truncated)
    foreign = tmp_path / "foreign.so"
    a = te.placeholder((3,), name="a")  # any compiled library without kiln's metadata
    tvm.compile(te.create_prim_func([a, te.compute((3,), lambda i: a[i] + 1)]), target="llvm").export_library(
        str(foreign))
    with pytest.raises(ExportError, match="not a kiln model"):
        Predictor(foreign)
    predictor = Predictor(path)
    with pytest.raises(ShapeError):
        predictor(np.zeros((2, 63), "float32"))
    with pytest.raises(DTypeError):
        predictor(np.zeros((2, 64), "float64"))


def test_an_export_for_cuda_is_refused_before_compiling(tmp_path):
    """The exported module and its Predictor run on the CPU: a CUDA target is
    a clear error, not TVM's GPU verifier failing on the symbolic batch."""
    with pytest.raises(ExportError, match="expected the CPU"):
        kiln.export(_mlp(), np.zeros((2, 64), "float32"), tmp_path / "model.so", target="cuda")
    assert not (tmp_path / "model.so").exists()


def test_entries_that_schedule_a_kernel_alike_share_it(tmp_path):
    """A conv on 3x32x32 images runs the template's defaults on every thread
    in each batch entry: the module holds each such kernel once
    (``graph/share.py``), and every entry still computes the model."""
    import tvm
    from kiln.graph import optimize, trace
    from kiln.graph.entries import ENTRIES
    from kiln.graph.lower import build_module

    nn.init.manual_seed(0)
    model = nn.Sequential(nn.Conv(3, 32, 3), nn.ReLU(), nn.Conv(32, 32, 3)).eval()
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    graph = optimize(trace(model, x), kiln.cpu())
    mod = build_module(graph, {}, kiln.cpu())
    kernels = [gv.name_hint for gv, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)
               and gv.name_hint.startswith("conv2d")]
    convs = sum(n.op.name.startswith("conv2d") for n in graph.nodes)
    assert len(kernels) < convs * len(ENTRIES), kernels
    predictor = Predictor(kiln.export(model, x, tmp_path / "m.so", batches=()))
    for batch in (1, 9, 40):  # one batch per entry
        xb = np.random.default_rng(batch).standard_normal((batch, 3, 32, 32)).astype(np.float32)
        np.testing.assert_allclose(predictor(xb), model(kiln.Tensor(xb)).numpy(), rtol=1e-4, atol=1e-4)
