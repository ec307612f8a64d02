"""What this machine can run kernels on: the one GPU check the tests share.

A CUDA kernel builds anywhere (nvcc is on the build machines) but runs only
where a GPU is present, so tests that run CUDA kernels skip without one and
tests of the no-GPU behaviour skip with one.
"""
import pytest
import tvm

HAS_GPU = tvm.cuda(0).exist
needs_gpu = pytest.mark.skipif(not HAS_GPU, reason="no CUDA GPU on this machine")
