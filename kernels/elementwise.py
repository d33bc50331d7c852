"""Elementwise kernels: ReLU forward and backward.

``relu_forward(x) = max(x, 0)``; ``relu_backward(y, gy) = gy * (y > 0)``.
The backward pass reads the *output* y (y > 0 exactly where x > 0), so the
layer keeps no extra mask. NaN passes through the forward (a diverging run
shows NaN rather than silent zeros). These kernels only stream memory, so
their speed is judged against memory bandwidth, not FLOP/s.

Any shape, float32 or float64; the arrays are processed as flat vectors in
parallel chunks, in memory order: a channels-last activation
(:mod:`minips.kernels.layout`) stays channels-last, with no copy. Twins:
``minips.kernels.reference.relu_forward`` / ``_backward``.
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


def _flat(a: np.ndarray):
    """``a`` as a 1-D view in memory order, or None when its memory is not one
    contiguous block (then the caller copies)."""
    if a.flags.c_contiguous:
        return a.reshape(-1)
    f = a.ravel(order="K")
    return f if np.shares_memory(f, a) else None


def relu_forward(x: np.ndarray) -> np.ndarray:
    """``max(x, 0)`` elementwise; same shape, dtype (float32/float64) and
    memory layout as x (a channels-last x gives a channels-last result).

    Raises:
        TypeError: x is not float32/float64.
    """
    if x.dtype not in (np.float32, np.float64):
        raise TypeError(f"relu_forward takes float32 or float64, got {x.dtype}")
    if _flat(x) is None:
        x = np.ascontiguousarray(x)
    y = np.empty_like(x)          # same strides as x
    _relu_forward(_flat(x), _flat(y))
    return y


def relu_backward(y: np.ndarray, gy: np.ndarray) -> np.ndarray:
    """``gy`` where ``y > 0``, else 0; shape and dtype of gy, memory layout of y.

    Args:
        y: the forward output; gy: dL/dy, same shape (any layout).

    Raises:
        ValueError: shapes differ.
    """
    if y.shape != gy.shape:
        raise ValueError(f"relu_backward: y has shape {y.shape} but gy has {gy.shape}")
    if _flat(y) is None:
        y = np.ascontiguousarray(y)
    gx = np.empty_like(y, dtype=gy.dtype)     # y's strides
    if gy.strides != gx.strides or _flat(gy) is None:
        np.copyto(gx, gy)         # gy in y's layout, in gx itself: the kernel works in place
        gy = gx
    _relu_backward(_flat(y), _flat(gy), _flat(gx))
    return gx
