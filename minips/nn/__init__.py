"""Layers, containers and losses (no MPI here: nn knows nothing about distribution)."""
from . import init  # noqa: F401
from .layers import Dropout, Flatten, Identity, Linear, ReLU, Sigmoid, Tanh  # noqa: F401
from .losses import cross_entropy  # noqa: F401
from .losses import sequence_cross_entropy  # noqa: F401
from .module import Module, Parameter, Sequential  # noqa: F401
from .recurrent import LSTM, Embedding  # noqa: F401
