"""Layers, containers and losses (no MPI here: nn knows nothing about distribution)."""
from . import init  # noqa: F401
from .layers import Dropout, Flatten, Identity, Linear, ReLU, Sigmoid, Tanh  # noqa: F401
from .losses import cross_entropy  # noqa: F401
from .losses import sequence_cross_entropy  # noqa: F401
from .module import Module, Parameter, Sequential  # noqa: F401
from .recurrent import LSTM, Embedding  # noqa: F401

# The convolution layers live in minips.nn.conv, which also registers the
# ConvNet model and so imports minips.models (which imports this package).
# Exporting them lazily (PEP 562) keeps that import cycle from ever running
# half-way: ``from minips.nn import Conv2d`` imports nn.conv on first use.
_CONV_NAMES = ("Conv2d", "MaxPool2d", "AvgPool2d", "ConvNet", "conv2d", "max_pool2d", "avg_pool2d")


def __getattr__(name):
    if name in _CONV_NAMES:
        from . import conv
        return getattr(conv, name)
    raise AttributeError(f"module 'minips.nn' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_CONV_NAMES))
