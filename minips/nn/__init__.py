"""Layers, containers and losses: the layer library, no models (those are in
:mod:`minips.models`) and no MPI (nn knows nothing about distribution).

nn imports only the engine below it (tensor, autograd, ops, random, kernels),
so every layer can be exported here directly.
"""
from . import init  # noqa: F401
from .conv import AvgPool2d, Conv2d, MaxPool2d, avg_pool2d, conv2d, max_pool2d  # noqa: F401
from .layers import Dropout, Flatten, Identity, Linear, ReLU, Sigmoid, Tanh  # noqa: F401
from .losses import cross_entropy, sequence_cross_entropy  # noqa: F401
from .module import Module, Parameter, Sequential  # noqa: F401
from .recurrent import LSTM, Embedding  # noqa: F401
