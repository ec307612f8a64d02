"""CPU schedule templates for specific op families (registered before the generic fallbacks)."""
from . import conv2d, matmul, softmax  # noqa: F401
