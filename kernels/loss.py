"""Fused log-softmax + cross-entropy (forward and backward).

For logits ``z`` (N, C) and labels ``y`` (N,):
``loss = mean_i( logsumexp(z_i) - z_i[y_i] )`` and
``dloss/dz_i = (softmax(z_i) - onehot(y_i)) / N``.
Twin: :func:`minips.kernels.reference.softmax_xent_forward` / ``_backward``.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

__all__ = ["softmax_xent_forward", "softmax_xent_backward"]


@njit(parallel=True, cache=True, nogil=True)
def _forward(z, y, probs, losses):
    n, c = z.shape
    for i in prange(n):
        m = z[i, 0]
        for j in range(1, c):
            if z[i, j] > m:
                m = z[i, j]
        s = 0.0
        for j in range(c):
            e = np.exp(z[i, j] - m)  # <= 1: never overflows
            probs[i, j] = e
            s += e
        for j in range(c):
            probs[i, j] /= s
        losses[i] = np.log(s) + m - z[i, y[i]]


@njit(parallel=True, cache=True, nogil=True)
def _backward(probs, y, scale, grad):
    n, c = probs.shape
    for i in prange(n):
        for j in range(c):
            grad[i, j] = probs[i, j] * scale
        grad[i, y[i]] -= scale


def softmax_xent_forward(z: np.ndarray, y: np.ndarray):
    """Mean cross-entropy and the softmax probabilities.

    Args:
        z: logits, (N, C) float32/float64.
        y: labels, (N,) int64, each in [0, C) (checked by the caller, see
           :func:`minips.ops.softmax_cross_entropy`).

    Returns:
        ``(loss, probs)``: a float (mean over N, in nats) and (N, C) probabilities
        of z's dtype, kept for the backward pass.
    """
    z = np.ascontiguousarray(z)
    probs = np.empty_like(z)
    losses = np.empty(z.shape[0], dtype=np.float64)
    _forward(z, np.ascontiguousarray(y, dtype=np.int64), probs, losses)
    return losses.mean() if len(losses) else 0.0, probs


def softmax_xent_backward(probs: np.ndarray, y: np.ndarray, g) -> np.ndarray:
    """``g * (probs - onehot(y)) / N``, shape (N, C), dtype of probs."""
    grad = np.empty_like(probs)
    n = probs.shape[0]
    _backward(probs, np.ascontiguousarray(y, dtype=np.int64), float(g) / max(n, 1), grad)
    return grad
