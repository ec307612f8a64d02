"""CPU schedule templates for specific op families (registered before the generic fallbacks)."""
from . import conv2d, conv2d_grad, matmul, optim, softmax, winograd  # noqa: F401
