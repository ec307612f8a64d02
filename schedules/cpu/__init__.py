"""CPU schedule templates for specific op families (registered before the generic fallbacks)."""
from . import (attention, conv2d, conv2d_grad, conv2d_transposed, depthwise, gather, int8, int8_conv,  # noqa: F401
               int8_depthwise, int8_matmul, layer_norm, lstm, matmul, norm, optim, pool, softmax, transpose, winograd)
