"""CPU targets: ``KILN_CPU`` names the CPU kernels are built for, each x86
vector width is at hand on every host (``vector_levels``), and code for
instruction sets this CPU lacks is refused when called or loaded, never run
(it would die of an illegal instruction)."""
import numpy as np
import pytest

import kiln
from kiln.errors import ConfigError, ExportError, KernelRuntimeError, TargetError
from kiln.runtime import Predictor
from kiln.runtime.device import LEVEL_CPUS, host, vector_levels

#: CPUs of instruction sets a host here may lack (AMX, AVX-512 FP16, AVX10): a target it cannot run
NEWER = ("graniterapids", "sapphirerapids", "znver5", "diamondrapids")


def _foreign():
    """A CPU target this host cannot run, or a skip."""
    for name in NEWER:
        try:
            target = kiln.cpu(name)
        except TargetError:  # an LLVM without that name
            continue
        if not target.runs_here:
            return target
    pytest.skip(f"this host ({host().mcpu}) runs the code of every CPU in {NEWER}")


def test_kiln_cpu_sets_the_target_and_an_unknown_name_is_a_config_error(monkeypatch):
    monkeypatch.setenv("KILN_CPU", "znver3")
    assert kiln.cpu().mcpu == "znver3" and kiln.cpu().vector_bits == 256
    assert kiln.cpu("skylake-avx512").vector_bits == 512  # a name given wins
    monkeypatch.setenv("KILN_CPU", "zen9000")
    with pytest.raises(ConfigError, match="KILN_CPU='zen9000'.*LLVM CPU name"):
        kiln.cpu()
    monkeypatch.delenv("KILN_CPU")
    assert kiln.cpu() is host()
    with pytest.raises(TargetError, match="LLVM does not know"):
        kiln.cpu("zen9000")


def test_every_vector_width_is_at_hand_and_the_host_runs_its_own():
    levels = vector_levels()
    assert levels[0] is kiln.cpu() and levels[0].runs_here
    assert sorted(t.vector_bits for t in levels) == sorted({kiln.cpu().vector_bits, *LEVEL_CPUS})
    for target in levels:  # a width runs here exactly when the host has its instruction sets
        assert target.runs_here == (target.isa <= host().isa)
        assert ("avx512f" in target.isa) == (target.vector_bits == 512) and "avx2" in target.isa


def test_a_kernel_for_a_cpu_this_one_cannot_run_compiles_and_is_refused_when_called():
    target = _foreign()
    kernel = kiln.build("add", [(64,), (64,)], target=target)
    assert "add" in kernel.source()  # its code is there to read
    x = np.ones(64, "float32")
    with pytest.raises(KernelRuntimeError, match=f"built for {target.mcpu}, whose .* this CPU"):
        kernel(x, x)
    with pytest.raises(KernelRuntimeError, match="lacks"):
        kernel.time(x, x)


def test_an_exported_model_for_a_cpu_this_one_cannot_run_is_refused_when_loaded(tmp_path, monkeypatch):
    target = _foreign()
    model = kiln.nn.Sequential(kiln.nn.Linear(8, 4))
    monkeypatch.setenv("KILN_CPU", target.mcpu)
    path = kiln.export(model, np.zeros((2, 8), "float32"), tmp_path / "m.so")
    monkeypatch.delenv("KILN_CPU")
    with pytest.raises(ExportError, match=f"built for {target.mcpu}, whose .* KILN_CPU={host().mcpu}"):
        Predictor(path)


def test_an_export_records_its_cpu_and_instruction_sets(tmp_path):
    model = kiln.nn.Sequential(kiln.nn.Linear(8, 4))
    meta = Predictor(kiln.export(model, np.zeros((2, 8), "float32"), tmp_path / "m.so")).meta
    assert meta["cpu"] == kiln.cpu().mcpu and set(meta["isa"]) == kiln.cpu().isa
