"""CPU schedule templates for specific op families (registered before the generic fallbacks)."""
from . import matmul  # noqa: F401
