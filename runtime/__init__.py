"""Targets, compilation through the kernel cache, and compiled kernels."""
from .build import build
from .device import Target, as_target, cpu, cuda
from .kernel import Kernel
from .predictor import Predictor

__all__ = ["Kernel", "Predictor", "Target", "as_target", "build", "cpu", "cuda"]
