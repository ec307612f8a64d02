"""needle-style autograd, modules, optimizers and data on compiled kernels."""
from . import functional, init, optim
from .clip_grad import clip_grad_norm_
from .modules import (AvgPool2d, BatchNorm1d, BatchNorm2d, Conv, Dropout, Flatten, GlobalAvgPool2d, Identity,
                      LayerNorm1d, Linear, MaxPool2d, Module, Parameter, ReLU, Residual, Sequential, Sigmoid,
                      SoftmaxLoss, Tanh)
from .rng import manual_seed
from .rnn import GRU, LSTM, RNN
from .rnn_cells import GRUCell, LSTMCell, RNNCell
from .sequence_modules import (Embedding, LayerNorm, LearnedPositionalEncoding, MultiheadAttention,
                               SinusoidalPositionalEncoding)
from .transformer import TransformerDecoderLayer, TransformerEncoderLayer
from .tensor import Tensor, no_grad

__all__ = ["AvgPool2d", "BatchNorm1d", "BatchNorm2d", "Conv", "Dropout", "Embedding", "Flatten", "GRU", "GRUCell",
           "GlobalAvgPool2d", "Identity", "LSTM", "LSTMCell", "LayerNorm", "LayerNorm1d", "LearnedPositionalEncoding",
           "Linear", "MaxPool2d", "Module", "MultiheadAttention", "Parameter", "RNN", "RNNCell", "ReLU", "Residual",
           "Sequential", "Sigmoid", "SinusoidalPositionalEncoding", "SoftmaxLoss", "Tanh", "Tensor",
           "TransformerDecoderLayer", "TransformerEncoderLayer", "clip_grad_norm_", "functional", "init",
           "manual_seed", "no_grad", "optim"]
