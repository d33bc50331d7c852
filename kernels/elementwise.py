"""Elementwise kernels: ReLU forward and backward.

``relu_forward(x) = max(x, 0)``; ``relu_backward(y, gy) = gy * (y > 0)``.
The backward pass reads the *output* y (y > 0 exactly where x > 0), so the
layer keeps no extra mask. NaN passes through the forward (a diverging run
shows NaN rather than silent zeros). These kernels only stream memory, so
their speed is judged against memory bandwidth, not FLOP/s.

Any shape, float32 or float64; the arrays are processed as flat vectors in
parallel chunks. Twins: ``minips.kernels.reference.relu_forward`` / ``_backward``.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

__all__ = ["relu_forward", "relu_backward"]


@njit(parallel=True, cache=True, nogil=True)
def _relu_forward(x, y):
    for i in prange(x.size):
        v = x[i]
        y[i] = 0 if v < 0 else v      # NaN is not < 0: it passes through


@njit(parallel=True, cache=True, nogil=True)
def _relu_backward(y, gy, gx):
    for i in prange(y.size):
        gx[i] = gy[i] if y[i] > 0 else 0


def relu_forward(x: np.ndarray) -> np.ndarray:
    """``max(x, 0)`` elementwise; same shape and dtype (float32/float64).

    Raises:
        TypeError: x is not float32/float64.
    """
    if x.dtype not in (np.float32, np.float64):
        raise TypeError(f"relu_forward takes float32 or float64, got {x.dtype}")
    x = np.ascontiguousarray(x)
    y = np.empty_like(x)
    _relu_forward(x.reshape(-1), y.reshape(-1))
    return y


def relu_backward(y: np.ndarray, gy: np.ndarray) -> np.ndarray:
    """``gy`` where ``y > 0``, else 0; shape and dtype of gy.

    Args:
        y: the forward output; gy: dL/dy, same shape.

    Raises:
        ValueError: shapes differ.
    """
    if y.shape != gy.shape:
        raise ValueError(f"relu_backward: y has shape {y.shape} but gy has {gy.shape}")
    y, gy = np.ascontiguousarray(y), np.ascontiguousarray(gy)
    gx = np.empty_like(gy)
    _relu_backward(y.reshape(-1), gy.reshape(-1), gx.reshape(-1))
    return gx
