"""Plain-NumPy twins of every Numba kernel: the readable spec and the test oracle.

Each function here computes exactly what the kernel of the same name in
``minips.kernels.<module>`` computes, written for clarity, not speed. Tests
compare the two on random shapes (odd sizes, batch 1, one channel, padding).
"""
from __future__ import annotations

import numpy as np


# --- loss.py -----------------------------------------------------------------
def softmax_xent_forward(z: np.ndarray, y: np.ndarray):
    """Twin of :func:`minips.kernels.loss.softmax_xent_forward`."""
    m = z.max(axis=1, keepdims=True)
    e = np.exp(z - m)
    s = e.sum(axis=1, keepdims=True)
    probs = e / s
    losses = np.log(s[:, 0]) + m[:, 0] - z[np.arange(len(y)), y]
    return (losses.astype(np.float64).mean() if len(y) else 0.0), probs.astype(z.dtype)


def softmax_xent_backward(probs: np.ndarray, y: np.ndarray, g) -> np.ndarray:
    """Twin of :func:`minips.kernels.loss.softmax_xent_backward`."""
    n = probs.shape[0]
    onehot = np.zeros_like(probs)
    onehot[np.arange(n), y] = 1
    return (float(g) * (probs - onehot) / max(n, 1)).astype(probs.dtype)
