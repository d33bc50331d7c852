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


# --- lstm.py -------------------------------------------------------------------
# Gate order along the 4H axis: (i, f, g, o), as in minips.kernels.lstm.
def _sigmoid(x):
    return 0.5 * np.tanh(0.5 * x) + 0.5  # = 1 / (1 + exp(-x)), never overflows


def lstm_forward(x, w_ih, w_hh, b, h0=None, c0=None):
    """Twin of :func:`minips.kernels.lstm.lstm_forward`: one step at a time."""
    steps, n, _ = x.shape
    hidden = w_hh.shape[1]
    dt = x.dtype
    h_prev = np.zeros((n, hidden), dt) if h0 is None else h0.astype(dt)
    c_prev = np.zeros((n, hidden), dt) if c0 is None else c0.astype(dt)
    hs, cs, gates, tanh_cs = [], [], [], []
    for t in range(steps):
        z = x[t] @ w_ih.T + h_prev @ w_hh.T + b
        zi, zf, zg, zo = np.split(z, 4, axis=1)
        i, f, g, o = _sigmoid(zi), _sigmoid(zf), np.tanh(zg), _sigmoid(zo)
        c = f * c_prev + i * g
        h = o * np.tanh(c)
        gates.append(np.concatenate([i, f, g, o], axis=1))
        hs.append(h)
        cs.append(c)
        tanh_cs.append(np.tanh(c))
        h_prev, c_prev = h, c
    return (np.stack(hs).astype(dt), np.stack(cs).astype(dt),
            np.stack(gates).astype(dt), np.stack(tanh_cs).astype(dt))


def lstm_backward(dh_out, dh_n, dc_n, x, w_ih, w_hh, h0, c0, h, c, gates, tanh_c):
    """Twin of :func:`minips.kernels.lstm.lstm_backward`: backpropagation
    through time, written step by step (derivation in docs/lstm.md)."""
    steps, n, _ = x.shape
    hidden = w_hh.shape[1]
    dt = x.dtype
    zeros = np.zeros((n, hidden), dt)
    h0 = zeros if h0 is None else h0
    c0 = zeros if c0 is None else c0
    dh = zeros.copy() if dh_n is None else dh_n.astype(dt).copy()
    dc = zeros.copy() if dc_n is None else dc_n.astype(dt).copy()
    dx = np.zeros_like(x)
    dw_ih, dw_hh = np.zeros_like(w_ih), np.zeros_like(w_hh)
    db = np.zeros(w_ih.shape[0], dt)
    for t in reversed(range(steps)):
        i, f, g, o = np.split(gates[t], 4, axis=1)
        c_prev = c0 if t == 0 else c[t - 1]
        h_prev = h0 if t == 0 else h[t - 1]
        dh = dh + dh_out[t]                                # two paths reach h_t
        do = dh * tanh_c[t]                                # h = o * tanh(c)
        dc = dc + dh * o * (1 - tanh_c[t] ** 2)
        di, df, dg = dc * g, dc * c_prev, dc * i           # c = f*c_prev + i*g
        dz = np.concatenate([di * i * (1 - i), df * f * (1 - f),
                             dg * (1 - g ** 2), do * o * (1 - o)], axis=1)
        dx[t] = dz @ w_ih
        dw_ih += dz.T @ x[t]
        dw_hh += dz.T @ h_prev
        db += dz.sum(axis=0)
        dh = dz @ w_hh                                     # to h_{t-1}
        dc = dc * f                                        # to c_{t-1}
    return dx, dh, dc, dw_ih, dw_hh, db
