"""CUDA schedule templates (registered before the CUDA fallback) and the
checks that run them without a GPU (``check.py``)."""
from . import conv2d, conv2d_grad, matmul, optim, reduction  # noqa: F401
