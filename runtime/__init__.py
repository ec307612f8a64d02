"""Targets, compilation through the kernel cache, compiled kernels and kernel pools."""
from .build import build
from .device import Target, as_target, cpu, cuda
from .kernel import Kernel
from .pool import KernelPool
from .predictor import Predictor

__all__ = ["Kernel", "KernelPool", "Predictor", "Target", "as_target", "build", "cpu", "cuda"]
