"""Seeded weight initialisation (draws from :mod:`minips.random`).

- Kaiming/He (He et al., "Delving Deep into Rectifiers", ICCV 2015): for ReLU
  networks, ``std = sqrt(2 / fan_in)`` keeps activation variance constant.
- Xavier/Glorot (Glorot & Bengio, AISTATS 2010): for tanh/sigmoid,
  ``U(-a, a)`` with ``a = sqrt(6 / (fan_in + fan_out))``.
"""
from __future__ import annotations

import numpy as np

from .. import random as mrandom

__all__ = ["resolve_rng", "kaiming_normal", "kaiming_uniform", "xavier_uniform", "uniform", "zeros"]


def resolve_rng(rng):
    """``rng`` (a ``numpy.random.Generator``), or minips's seeded generator when None."""
    return mrandom.generator() if rng is None else rng


def kaiming_normal(shape, fan_in: int, rng=None, dtype=np.float32) -> np.ndarray:
    """Normal(0, 2/fan_in) samples of ``shape`` (for layers followed by ReLU)."""
    return (resolve_rng(rng).standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(dtype)


def kaiming_uniform(shape, fan_in: int, rng=None, dtype=np.float32) -> np.ndarray:
    """U(-b, b), b = sqrt(6/fan_in): the same variance 2/fan_in as kaiming_normal."""
    b = np.sqrt(6.0 / fan_in)
    return resolve_rng(rng).uniform(-b, b, shape).astype(dtype)


def xavier_uniform(shape, fan_in: int, fan_out: int, rng=None, dtype=np.float32) -> np.ndarray:
    """U(-a, a), a = sqrt(6/(fan_in+fan_out)) (for tanh/sigmoid layers)."""
    a = np.sqrt(6.0 / (fan_in + fan_out))
    return resolve_rng(rng).uniform(-a, a, shape).astype(dtype)


def uniform(shape, bound: float, rng=None, dtype=np.float32) -> np.ndarray:
    """U(-bound, bound) samples (biases, as in PyTorch: bound = 1/sqrt(fan_in))."""
    return resolve_rng(rng).uniform(-bound, bound, shape).astype(dtype)


def zeros(shape, dtype=np.float32) -> np.ndarray:
    return np.zeros(shape, dtype)
