"""Basic layers: Linear, activations, Dropout, Flatten."""
from __future__ import annotations

import numpy as np

from .. import ops
from .. import random as mrandom
from ..autograd import Function
from ..tensor import Tensor
from . import init
from .module import Module, Parameter

__all__ = ["Linear", "ReLU", "Tanh", "Sigmoid", "Dropout", "Flatten", "Identity"]


class Linear(Module):
    """``y = x @ W.T + b``.

    Args:
        in_features, out_features: sizes; input (N, in) or (..., in) -> (..., out).
        bias: learn a bias (default True).
        init_mode: ``"kaiming"`` (before ReLU, default) or ``"xavier"`` (before tanh).
        rng: a ``np.random.Generator``; default the global :mod:`minips.random`.

    Weight shape (out, in) as in PyTorch; float32.

    Raises:
        ValueError: the input's last dimension is not ``in_features``.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 init_mode: str = "kaiming", rng=None):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        shape = (out_features, in_features)
        if init_mode == "kaiming":
            w = init.kaiming_uniform(shape, in_features, rng)
        elif init_mode == "xavier":
            w = init.xavier_uniform(shape, in_features, out_features, rng)
        else:
            raise ValueError(f"init_mode must be 'kaiming' or 'xavier', got {init_mode!r}")
        self.weight = Parameter(w)
        self.bias = Parameter(init.uniform((out_features,), 1 / np.sqrt(in_features), rng)) if bias else None

    def forward(self, x):
        if x.shape[-1] != self.in_features:
            raise ValueError(f"Linear({self.in_features}, {self.out_features}): input has "
                             f"{x.shape[-1]} features in its last dimension (shape {x.shape}), "
                             f"expected {self.in_features}")
        y = ops.matmul(x, ops.transpose(self.weight))
        return y + self.bias if self.bias is not None else y

    def extra_repr(self):
        return f"{self.in_features}, {self.out_features}, bias={self.bias is not None}"


class ReLU(Module):
    """Elementwise ``max(x, 0)``."""

    def forward(self, x):
        return ops.relu(x)


class Tanh(Module):
    """Elementwise tanh."""

    def forward(self, x):
        return ops.tanh(x)


class Sigmoid(Module):
    """Elementwise logistic function."""

    def forward(self, x):
        return ops.sigmoid(x)


class Identity(Module):
    """Returns its input unchanged (a placeholder layer)."""
    def forward(self, x):
        return x


class DropoutFunction(Function):
    """Inverted dropout: keep with probability ``1-p`` and scale by ``1/(1-p)``
    so the expected activation is unchanged and evaluation needs no rescaling
    (Srivastava et al., JMLR 2014)."""

    def forward(self, x, *, mask):
        self.mask = mask
        return x * mask

    def backward(self, g):
        return g * self.mask


class Dropout(Module):
    """Zero each element with probability ``p`` in training mode; identity in eval.

    The mask is drawn from the global :mod:`minips.random` generator (or
    ``rng``), so a seed fixes it.

    Raises:
        ValueError: ``p`` not in [0, 1).
    """

    def __init__(self, p: float = 0.5, rng=None):
        super().__init__()
        if not 0 <= p < 1:
            raise ValueError(f"Dropout probability must be in [0, 1), got {p}")
        self.p, self.rng = p, rng

    def forward(self, x):
        if not self.training or self.p == 0:
            return x
        rng = self.rng or mrandom.generator()
        keep = rng.random(x.shape) >= self.p
        mask = (keep / (1 - self.p)).astype(x.dtype)
        return DropoutFunction.apply(x, mask=mask)

    def extra_repr(self):
        return f"p={self.p}"


class Flatten(Module):
    """(N, d1, d2, ...) -> (N, d1*d2*...)."""

    def __init__(self, start_dim: int = 1):
        super().__init__()
        self.start_dim = start_dim

    def forward(self, x: Tensor):
        return ops.flatten(x, self.start_dim)
