"""What this machine can run kernels on, and the targets tests build for.

A CUDA kernel builds anywhere (nvcc is on the build machines) but runs only
where a GPU is present, so tests that run CUDA kernels skip without one and
tests of the no-GPU behaviour skip with one.

The CPU's x86 vector widths (``kiln.runtime.device.vector_levels``): the
host's own, and a stand-in of the other width, AVX2 or AVX-512. Every width
is built on every host (LLVM compiles for any CPU), and run where the host
can run it (an AVX-512 host runs AVX2 code; an AVX2 host only compiles the
AVX-512 kernels). ``cpu_level`` runs a whole test as if kiln were on that CPU
(``KILN_CPU``), so graph passes, exports and gradients meet each width's
tiles and blocks.
"""
import pytest
import tvm

import kiln
from kiln.runtime.device import vector_levels

HAS_GPU = tvm.cuda(0).exist
needs_gpu = pytest.mark.skipif(not HAS_GPU, reason="no CUDA GPU on this machine")


def level_id(target) -> str:
    return {512: "avx512", 256: "avx2"}.get(target.vector_bits, f"{target.vector_bits}bit")


CPU_LEVELS = vector_levels()
#: each CPU vector width, then CUDA (run with a GPU only)
TARGETS = [pytest.param(t, id=level_id(t)) for t in CPU_LEVELS] + \
          [pytest.param(kiln.cuda(), id="cuda", marks=needs_gpu)]


@pytest.fixture(params=CPU_LEVELS, ids=level_id)
def cpu_level(request, monkeypatch):
    """The test runs with kiln building for each CPU vector width in turn
    (``KILN_CPU``); skipped where the host cannot run that width's code."""
    target = request.param
    if not target.runs_here:
        pytest.skip(f"this host cannot run {target.mcpu} code ({level_id(target)}); its kernels are "
                    "compiled by the op table and the sweep")
    monkeypatch.setenv("KILN_CPU", target.mcpu)
    assert kiln.cpu() is target
    return target
