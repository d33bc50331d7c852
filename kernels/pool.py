"""Max and average pooling over (kh, kw) windows with stride (sh, sw), channels-last.

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

Memory is channels-last (:mod:`minips.kernels.layout`): the kernels read x as
(N, H, W, C), so the innermost loop runs over the C channels of one pixel,
contiguous and vectorised for any window; results are channels-last views of
(N, C, ...) shape. An NCHW input is copied to NHWC first. Forward kernels are
parallel over output rows (n, p), backward kernels over images (overlapping
windows of one image add into the same elements, so one task owns an image).
Float32 and float64. Twins: ``minips.kernels.reference.maxpool2d_*``,
``avgpool2d_*``. (The ReLU + max pooling that follow a convolution are fused
into its epilogue: :mod:`minips.kernels.conv`.)
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from .arena import NO_ARENA
from .layout import as_nchw, to_nhwc

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
def _maxpool_nhwc(x, kh, kw, sh, sw, y, argmax):
    """y[n, p, q, c] = the maximum of x[n, p*sh + i, q*sw + j, c] over the window,
    argmax = its flat index h*W + w in the plane (the first in row-major window order on
    ties). x (N, H, W, C); y, argmax (N, P, Q, C). Output rows (n, p) in parallel, then
    q and the window; innermost loop over C."""
    W, C = x.shape[2], x.shape[3]
    P, Q = y.shape[1], y.shape[2]
    for npp in prange(y.shape[0] * P):
        n, p = npp // P, npp % P
        h0 = p * sh
        for q in range(Q):
            w0 = q * sw
            for c in range(C):
                y[n, p, q, _u(c)] = x[n, h0, w0, _u(c)]
                argmax[n, p, q, _u(c)] = h0 * W + w0
            for i in range(kh):
                for j in range(kw):
                    if i + j == 0:
                        continue
                    where = (h0 + i) * W + w0 + j
                    for c in range(C):
                        v = x[n, h0 + i, w0 + j, _u(c)]
                        take = v > y[n, p, q, _u(c)]   # strict: the first maximum wins ties
                        y[n, p, q, _u(c)] = v if take else y[n, p, q, _u(c)]
                        argmax[n, p, q, _u(c)] = where if take else argmax[n, p, q, _u(c)]


@njit(parallel=True, cache=True, nogil=True)
def _maxpool_backward_nhwc(gy, argmax, gx):
    """gx = 0, then gx[n, a, c] += gy[n, p, q, c] with a = argmax[n, p, q, c] (added:
    overlapping windows can pick the same element). gy, argmax (N, P, Q, C); gx
    (N, H*W, C), the pixels of each image in one axis, so the flat index a = h*W + w
    needs no division. Images in parallel (each task owns its image's gx); innermost
    loop over C."""
    N, HW, C = gx.shape
    P, Q = gy.shape[1], gy.shape[2]
    for n in prange(N):
        gx[n] = 0
        for p in range(P):
            for q in range(Q):
                for c in range(C):
                    gx[n, argmax[n, p, q, c], _u(c)] += gy[n, p, q, c]


@njit(parallel=True, cache=True, nogil=True)
def _avgpool_nhwc(x, kh, kw, sh, sw, y):
    """y[n, p, q, :] = the mean of x[n, p*sh + i, q*sw + j, :] over the window (sum, then
    times 1/(kh*kw)). Output rows in parallel; innermost loop over C."""
    C = x.shape[3]
    P, Q = y.shape[1], y.shape[2]
    inv = 1.0 / (kh * kw)
    for npp in prange(y.shape[0] * P):
        n, p = npp // P, npp % P
        for q in range(Q):
            for c in range(C):
                y[n, p, q, _u(c)] = 0
            for i in range(kh):
                for j in range(kw):
                    for c in range(C):
                        y[n, p, q, _u(c)] += x[n, p * sh + i, q * sw + j, _u(c)]
            for c in range(C):
                y[n, p, q, _u(c)] *= inv


@njit(parallel=True, cache=True, nogil=True)
def _avgpool_backward_nhwc(gy, kh, kw, sh, sw, gx):
    """gx = 0, then every element of window (p, q) gets gy[n, p, q, :] / (kh*kw) added.
    Images in parallel; innermost loop over C."""
    N, C = gx.shape[0], gx.shape[3]
    P, Q = gy.shape[1], gy.shape[2]
    inv = 1.0 / (kh * kw)
    for n in prange(N):
        gx[n] = 0
        for p in range(P):
            for q in range(Q):
                for i in range(kh):
                    for j in range(kw):
                        for c in range(C):
                            gx[n, p * sh + i, q * sw + j, _u(c)] += gy[n, p, q, _u(c)] * inv


def _float(x, what):
    if x.dtype not in (np.float32, np.float64):
        raise TypeError(f"{what} takes float32 or float64, got {x.dtype}")
    return x


def maxpool2d_forward(x: np.ndarray, kernel, stride, arena=NO_ARENA):
    """Max pooling.

    Args:
        x: (N, C, H, W) float32/float64, either memory layout.
        kernel, stride: int or (vertical, horizontal) pair.
        arena: where the results come from (:mod:`minips.kernels.arena`);
            default fresh arrays.

    Returns:
        ``(y, argmax)``: y (N, C, P, Q) of x's dtype; argmax (N, C, P, Q) int32,
        the flat index ``h*W + w`` of each maximum in its input plane; both
        channels-last.

    Raises:
        ValueError: see :func:`pool_output_size`; TypeError: non-float x.
    """
    kh, kw, sh, sw, P, Q = pool_output_size(x.shape, kernel, stride)
    xh = to_nhwc(_float(x, "maxpool2d"), arena)
    N, C = x.shape[:2]
    y = arena.take((N, P, Q, C), x.dtype)
    argmax = arena.take((N, P, Q, C), np.int32)
    _maxpool_nhwc(xh, kh, kw, sh, sw, y, argmax)
    return as_nchw(y), as_nchw(argmax)


def maxpool2d_backward(gy: np.ndarray, argmax: np.ndarray, x_shape, arena=NO_ARENA) -> np.ndarray:
    """dL/dx of max pooling: (N, C, H, W) channels-last, dtype of gy.

    Args:
        gy: dL/dy (N, C, P, Q); argmax: from :func:`maxpool2d_forward`;
        x_shape: the forward input's shape; arena: as in the forward.
    """
    N, C, H, W = x_shape
    gyh = to_nhwc(_float(gy, "maxpool2d_backward"), arena)
    gx = arena.take((N, H, W, C), gy.dtype)
    _maxpool_backward_nhwc(gyh, to_nhwc(argmax, arena), gx.reshape(N, H * W, C))
    return as_nchw(gx)


def avgpool2d_forward(x: np.ndarray, kernel, stride, arena=NO_ARENA) -> np.ndarray:
    """Average pooling: (N, C, P, Q) window means, dtype of x, channels-last.

    Raises:
        ValueError: see :func:`pool_output_size`; TypeError: non-float x.
    """
    kh, kw, sh, sw, P, Q = pool_output_size(x.shape, kernel, stride)
    xh = to_nhwc(_float(x, "avgpool2d"), arena)
    y = arena.take((x.shape[0], P, Q, x.shape[1]), x.dtype)
    _avgpool_nhwc(xh, kh, kw, sh, sw, y)
    return as_nchw(y)


def avgpool2d_backward(gy: np.ndarray, x_shape, kernel, stride, arena=NO_ARENA) -> np.ndarray:
    """dL/dx of average pooling: (N, C, H, W) channels-last, dtype of gy."""
    kh, kw, sh, sw, P, Q = pool_output_size(x_shape, kernel, stride)
    if gy.shape != tuple(x_shape[:2]) + (P, Q):
        raise ValueError(f"avgpool2d_backward: gy has shape {gy.shape}, expected "
                         f"{tuple(x_shape[:2]) + (P, Q)}")
    N, C, H, W = x_shape
    gyh = to_nhwc(_float(gy, "avgpool2d_backward"), arena)
    gx = arena.take((N, H, W, C), gy.dtype)
    _avgpool_backward_nhwc(gyh, kh, kw, sh, sw, gx)
    return as_nchw(gx)
