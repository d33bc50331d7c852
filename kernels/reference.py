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


# =============================================================================
# conv.py: 2-D convolution (NCHW). Names as in minips.kernels.conv:
# x (N, C, H, W), w (K, C, R, S), b (K,), stride (sh, sw), padding (ph, pw),
# y (N, K, P, Q).
# =============================================================================
def _conv_sizes(x_shape, w_shape, stride, padding):
    (sh, sw), (ph, pw) = _pair(stride), _pair(padding)
    N, C, H, W = x_shape
    K, _, R, S = w_shape
    P = (H + 2 * ph - R) // sh + 1
    Q = (W + 2 * pw - S) // sw + 1
    return N, C, H, W, K, R, S, sh, sw, ph, pw, P, Q


def _pair(v):
    return (int(v), int(v)) if np.isscalar(v) else (int(v[0]), int(v[1]))


def _window(xp, r, s, sh, sw, P, Q):
    """The input pixels that kernel offset (r, s) touches for every output
    pixel: ``xp[:, :, p*sh + r, q*sw + s]`` for all p, q; shape (N, C, P, Q).
    ``xp`` is the zero-padded input."""
    return xp[:, :, r:r + sh * (P - 1) + 1:sh, s:s + sw * (Q - 1) + 1:sw]


def conv2d_forward(x, w, b=None, stride=1, padding=0):
    """Twin of :func:`minips.kernels.conv.conv2d_forward` (returns y only).

    A convolution is a sum over kernel offsets (r, s): each offset multiplies
    a shifted (and strided) view of the padded input by the K x C matrix
    ``w[:, :, r, s]``.
    """
    N, C, H, W, K, R, S, sh, sw, ph, pw, P, Q = _conv_sizes(x.shape, w.shape, stride, padding)
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    y = np.zeros((N, K, P, Q), dtype=x.dtype)
    for r in range(R):
        for s in range(S):
            y += np.einsum("ncpq,kc->nkpq", _window(xp, r, s, sh, sw, P, Q), w[:, :, r, s])
    if b is not None:
        y += b[None, :, None, None]
    return y


def conv2d_backward_data(gy, w, x_shape, stride=1, padding=0):
    """Twin of :func:`minips.kernels.conv.conv2d_backward_data`: dL/dx.

    Each input pixel received ``w[k, c, r, s] * x`` in the forward sum; so it
    gets back ``w[k, c, r, s] * gy`` through the same window, summed over
    every (k, r, s) it took part in. The padding's share is cut off.
    """
    N, C, H, W, K, R, S, sh, sw, ph, pw, P, Q = _conv_sizes(x_shape, w.shape, stride, padding)
    gxp = np.zeros((N, C, H + 2 * ph, W + 2 * pw), dtype=gy.dtype)
    for r in range(R):
        for s in range(S):
            _window(gxp, r, s, sh, sw, P, Q)[...] += np.einsum("nkpq,kc->ncpq", gy, w[:, :, r, s])
    return gxp[:, :, ph:ph + H, pw:pw + W]


def conv2d_backward_weight(gy, x, w_shape, stride=1, padding=0):
    """Twin of :func:`minips.kernels.conv.conv2d_backward_weight`: (dL/dw, dL/db).

    ``dL/dw[k, c, r, s]`` sums ``gy[n, k, p, q] * x[n, c, p*sh - ph + r, q*sw - pw + s]``
    over n, p, q (the window of offset (r, s)); ``dL/db[k]`` sums gy[:, k].
    """
    N, C, H, W, K, R, S, sh, sw, ph, pw, P, Q = _conv_sizes(x.shape, w_shape, stride, padding)
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    gw = np.zeros(w_shape, dtype=gy.dtype)
    for r in range(R):
        for s in range(S):
            gw[:, :, r, s] = np.einsum("nkpq,ncpq->kc", gy, _window(xp, r, s, sh, sw, P, Q))
    return gw, gy.sum(axis=(0, 2, 3))


def im2col(x, R, S, stride=1, padding=0):
    """Twin of :func:`minips.kernels.conv.im2col`: (C*R*S, N*P*Q) patches.

    Row ``(c*R + r)*S + s`` holds, for every output pixel (n, p, q), the input
    value that weight ``w[:, c, r, s]`` multiplies.
    """
    N, C, H, W, _, R, S, sh, sw, ph, pw, P, Q = _conv_sizes(x.shape, (1, x.shape[1], R, S),
                                                           stride, padding)
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    cols = np.empty((C, R, S, N, P, Q), dtype=x.dtype)
    for r in range(R):
        for s in range(S):
            cols[:, r, s] = _window(xp, r, s, sh, sw, P, Q).transpose(1, 0, 2, 3)
    return cols.reshape(C * R * S, N * P * Q)


def col2im(cols, x_shape, R, S, stride=1, padding=0):
    """Twin of :func:`minips.kernels.conv.col2im`: the adjoint of :func:`im2col`
    (add every column entry back where im2col read it)."""
    N, C, H, W, _, R, S, sh, sw, ph, pw, P, Q = _conv_sizes(x_shape, (1, x_shape[1], R, S),
                                                           stride, padding)
    c6 = cols.reshape(C, R, S, N, P, Q)
    gxp = np.zeros((N, C, H + 2 * ph, W + 2 * pw), dtype=cols.dtype)
    for r in range(R):
        for s in range(S):
            _window(gxp, r, s, sh, sw, P, Q)[...] += c6[:, r, s].transpose(1, 0, 2, 3)
    return gxp[:, :, ph:ph + H, pw:pw + W]


# =============================================================================
# pool.py: max and average pooling over (kh, kw) windows with stride (sh, sw),
# no padding; output (N, C, P, Q), P = (H - kh) // sh + 1, Q = (W - kw) // sw + 1.
# =============================================================================
def _pool_windows(x, kernel, stride):
    """All windows as one array (kh*kw, N, C, P, Q), offsets in row-major order
    (i, j) -> i*kw + j, so argmax picks the first maximum in that order."""
    (kh, kw), (sh, sw) = _pair(kernel), _pair(stride)
    N, C, H, W = x.shape
    P, Q = (H - kh) // sh + 1, (W - kw) // sw + 1
    return np.stack([x[:, :, i:i + sh * (P - 1) + 1:sh, j:j + sw * (Q - 1) + 1:sw]
                     for i in range(kh) for j in range(kw)]), (kh, kw, sh, sw, P, Q)


def maxpool2d_forward(x, kernel, stride):
    """Twin of :func:`minips.kernels.pool.maxpool2d_forward`.

    Returns ``(y, argmax)``: y (N, C, P, Q) the window maxima; argmax (N, C, P, Q)
    int32, the flat index ``h*W + w`` in the input plane of the maximum (the
    first one in row-major window order when several are equal).
    """
    win, (kh, kw, sh, sw, P, Q) = _pool_windows(x, kernel, stride)
    k = win.argmax(axis=0)                      # window offset i*kw + j
    i, j = np.divmod(k, kw)
    p = np.arange(P)[:, None]
    q = np.arange(Q)[None, :]
    argmax = (p * sh + i) * x.shape[3] + (q * sw + j)
    return win.max(axis=0), argmax.astype(np.int32)


def maxpool2d_backward(gy, argmax, x_shape):
    """Twin of :func:`minips.kernels.pool.maxpool2d_backward`: each output's
    gradient goes to the input element that was the maximum (added up where
    overlapping windows chose the same element)."""
    N, C, H, W = x_shape
    gx = np.zeros((N * C, H * W), dtype=gy.dtype)
    rows = np.arange(N * C)[:, None]
    np.add.at(gx, (rows, argmax.reshape(N * C, -1)), gy.reshape(N * C, -1))
    return gx.reshape(x_shape)


def avgpool2d_forward(x, kernel, stride):
    """Twin of :func:`minips.kernels.pool.avgpool2d_forward`: window means."""
    win, _ = _pool_windows(x, kernel, stride)
    return win.mean(axis=0).astype(x.dtype)


def avgpool2d_backward(gy, x_shape, kernel, stride):
    """Twin of :func:`minips.kernels.pool.avgpool2d_backward`: every element of a
    window gets ``gy / (kh*kw)`` (summed over the windows it belongs to)."""
    (kh, kw), (sh, sw) = _pair(kernel), _pair(stride)
    _, _, P, Q = gy.shape
    gx = np.zeros(x_shape, dtype=gy.dtype)
    share = gy / (kh * kw)
    for i in range(kh):
        for j in range(kw):
            gx[:, :, i:i + sh * (P - 1) + 1:sh, j:j + sw * (Q - 1) + 1:sw] += share
    return gx


# =============================================================================
# elementwise.py: ReLU
# =============================================================================
def relu_forward(x):
    """Twin of :func:`minips.kernels.elementwise.relu_forward`: ``max(x, 0)``."""
    return np.maximum(x, 0).astype(x.dtype)


def relu_backward(y, gy):
    """Twin of :func:`minips.kernels.elementwise.relu_backward`: ``gy`` where the
    output ``y`` is positive, else 0 (the subgradient at 0 is taken as 0)."""
    return np.where(y > 0, gy, 0).astype(gy.dtype)


# --- lstm.py -------------------------------------------------------------------
# Gate order along the 4H axis: (i, f, g, o), as in minips.kernels.lstm.
def _sigmoid(x):
    return 0.5 * np.tanh(0.5 * x) + 0.5  # = 1 / (1 + exp(-x)), never overflows


def step_forward(z, zh, b, c_prev):
    """Twin of :func:`minips.kernels.lstm.step_forward` (which works in place):
    returns ``(gates, c, tanh_c, h)`` for pre-activation parts z, zh (N, 4H)."""
    zi, zf, zg, zo = np.split(z + zh + b, 4, axis=1)
    i, f, g, o = _sigmoid(zi), _sigmoid(zf), np.tanh(zg), _sigmoid(zo)
    c = f * c_prev + i * g
    return np.concatenate([i, f, g, o], axis=1), c, np.tanh(c), o * np.tanh(c)


def step_backward(gates, c_prev, tanh_c, dh_out, dh, dc):
    """Twin of :func:`minips.kernels.lstm.step_backward` (which works in
    place): returns ``(dz, dc_prev)``, the gradients of the step's
    pre-activations (N, 4H) and of c_{t-1} (N, H)."""
    i, f, g, o = np.split(gates, 4, axis=1)
    dh = dh + dh_out                                   # two paths reach h_t
    do = dh * tanh_c                                   # h = o * tanh(c)
    dc = dc + dh * o * (1 - tanh_c ** 2)
    di, df, dg = dc * g, dc * c_prev, dc * i           # c = f*c_prev + i*g
    dz = np.concatenate([di * i * (1 - i), df * f * (1 - f), dg * (1 - g ** 2), do * o * (1 - o)], axis=1)
    return dz, dc * f                                  # c_{t-1} reaches c_t through f


def lstm_forward(x, w_ih, w_hh, b, h0=None, c0=None):
    """Twin of :func:`minips.kernels.lstm.lstm_forward`: one step at a time."""
    steps, n, _ = x.shape
    hidden = w_hh.shape[1]
    dt = x.dtype
    h_prev = np.zeros((n, hidden), dt) if h0 is None else h0.astype(dt)
    c_prev = np.zeros((n, hidden), dt) if c0 is None else c0.astype(dt)
    outs = []
    for t in range(steps):
        gates, c, tanh_c, h = step_forward(x[t] @ w_ih.T, h_prev @ w_hh.T, b, c_prev)
        outs.append((h, c, gates, tanh_c))
        h_prev, c_prev = h, c
    return tuple(np.stack(a).astype(dt) for a in zip(*outs))


def lstm_backward(dh_out, dh_n, dc_n, x, w_ih, w_hh, h0, c0, h, c, gates, tanh_c):
    """Twin of :func:`minips.kernels.lstm.lstm_backward`: backpropagation
    through time, written step by step (derivation in docs/lstm.md)."""
    steps, n, _ = x.shape
    hidden = w_hh.shape[1]
    dt = x.dtype
    zeros = np.zeros((n, hidden), dt)
    h0 = zeros if h0 is None else h0
    c0 = zeros if c0 is None else c0
    dh = zeros if dh_n is None else dh_n.astype(dt)
    dc = zeros if dc_n is None else dc_n.astype(dt)
    dx = np.zeros_like(x)
    dw_ih, dw_hh = np.zeros_like(w_ih), np.zeros_like(w_hh)
    db = np.zeros(w_ih.shape[0], dt)
    for t in reversed(range(steps)):
        c_prev = c0 if t == 0 else c[t - 1]
        h_prev = h0 if t == 0 else h[t - 1]
        dz, dc = step_backward(gates[t], c_prev, tanh_c[t], dh_out[t], dh, dc)
        dx[t] = dz @ w_ih
        dw_ih += dz.T @ x[t]
        dw_hh += dz.T @ h_prev
        db += dz.sum(axis=0)
        dh = dz @ w_hh                                 # to h_{t-1}
    return dx, dh, dc, dw_ih, dw_hh, db


# --- compressors (twins of minips.kernels.compress) ---------------------------------
def qsgd_quantize(v, s, bucket, u):
    """QSGD stochastic rounding per bucket: (norms float32, codes int16)."""
    d = v.size
    nb = (d + bucket - 1) // bucket
    x = np.zeros(nb * bucket, np.float64)
    x[:d] = v
    x = x.reshape(nb, bucket)
    norms = np.sqrt((x * x).sum(1))
    safe = np.where(norms == 0, 1.0, norms)
    r = (s * np.abs(x) / safe[:, None]).ravel()[:d]
    lev = np.floor(r) + (u < r - np.floor(r))
    lev = np.where(np.repeat(norms, bucket)[:d] == 0, 0, lev)
    return norms.astype(np.float32), (np.sign(v.astype(np.float64)) * lev).astype(np.int16)


def qsgd_dequantize(norms, codes, s, bucket):
    """``norm_of_bucket * code / s`` as float32."""
    return (np.repeat(norms.astype(np.float64), bucket)[:codes.size] * codes / s).astype(np.float32)


def countsketch_accumulate(v, buckets, signs, cols):
    """``S[r, h_r(j)] += s_r(j) v_j``: float32 (rows, cols)."""
    table = np.zeros((buckets.shape[0], cols), np.float32)
    for r in range(buckets.shape[0]):
        np.add.at(table[r], buckets[r], signs[r] * v)
    return table


def countsketch_query(table, buckets, signs):
    """Median over rows of ``s_r(j) S[r, h_r(j)]``: float32 (d,)."""
    est = signs * np.take_along_axis(table, buckets.astype(np.int64), axis=1)
    return np.median(est, axis=0).astype(np.float32)
