"""needle-style autograd, modules, optimizers and data on compiled kernels."""
from . import init, optim
from .modules import (AvgPool2d, BatchNorm1d, BatchNorm2d, Conv, Dropout, Flatten, GlobalAvgPool2d, Identity,
                      LayerNorm1d, Linear, MaxPool2d, Module, Parameter, ReLU, Residual, Sequential, Sigmoid,
                      SoftmaxLoss, Tanh)
from .tensor import Tensor, no_grad

__all__ = ["AvgPool2d", "BatchNorm1d", "BatchNorm2d", "Conv", "Dropout", "Flatten", "GlobalAvgPool2d", "Identity",
           "LayerNorm1d", "Linear", "MaxPool2d", "Module", "Parameter", "ReLU", "Residual", "Sequential", "Sigmoid",
           "SoftmaxLoss", "Tanh", "Tensor", "init", "no_grad", "optim"]
