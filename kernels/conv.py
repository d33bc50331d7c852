"""2-D convolution: forward, backward-data and backward-weight (NCHW).

Notation (used in every docstring and in ``docs/kernels.md``):

- input ``x``  (N, C, H, W): N images of C channels, H rows, W columns;
- weight ``w`` (K, C, R, S): K filters, each C x R x S;
- bias ``b``   (K,);
- stride ``(sh, sw)`` and zero padding ``(ph, pw)``;
- output ``y``  (N, K, P, Q) with ``P = (H + 2ph - R) // sh + 1`` and
  ``Q = (W + 2pw - S) // sw + 1``.

``y[n,k,p,q] = b[k] + sum_{c,r,s} w[k,c,r,s] * x[n, c, p*sh - ph + r, q*sw - pw + s]``
(a cross-correlation, as in every deep-learning library; x is 0 outside its border).

How it is computed (the **im2col** method, Chellapilla et al. 2006, used by
Caffe): copy every input patch that one output pixel sees into one column of a
matrix ``cols`` of shape (C*R*S, N*P*Q); then the whole convolution is one
matrix product ``w.reshape(K, C*R*S) @ cols`` done by BLAS, the fastest code on
the machine. The backward passes are two more matrix products with the same
matrices, and **col2im** (the adjoint of im2col: add each column back into the
patch it came from) turns the gradient of ``cols`` into the gradient of ``x``.

For inputs with very few channels (C*R*S small: the first layer of a network
on grey or RGB images) the matrix product is too thin for BLAS to shine, so
the forward pass (stride 1) runs a **direct** loop nest instead (same result,
no ``cols`` matrix): see :func:`use_direct` and :func:`_direct_forward`. Its
backward pass uses im2col + BLAS like the others (measured faster).

The Numba kernels are parallel over independent pieces of the output (an
image-channel plane, or a filter), so threads never write the same element.
All work for float32 and float64. Twins: ``minips.kernels.reference.conv2d_*``,
``im2col``, ``col2im``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit, prange

__all__ = ["ConvGeometry", "geometry", "conv2d_forward", "conv2d_backward",
           "conv2d_backward_data", "conv2d_backward_weight", "use_direct",
           "im2col", "col2im", "DIRECT_MAX_CRS"]

#: Use the direct forward when C*R*S is at most this. Measured (AVX2, 1
#: thread, batch 64, 3x3): direct/im2col time 0.9 at C=1, 0.9 at C=2, 0.6 at
#: C=3; from C=4 to 8 the winner changed between runs on a busy machine, and
#: at C=16 im2col + BLAS was 1.7x faster. Re-measure with ``bench kernels``.
DIRECT_MAX_CRS = 27


# --- shapes -------------------------------------------------------------------
@dataclass(frozen=True)
class ConvGeometry:
    """All sizes of one convolution (see the module docstring for the names)."""
    N: int
    C: int
    H: int
    W: int
    K: int
    R: int
    S: int
    sh: int
    sw: int
    ph: int
    pw: int
    P: int
    Q: int

    @property
    def flops_forward(self) -> int:
        """Multiply-adds x 2 of the forward pass (the bias is not counted)."""
        return 2 * self.N * self.K * self.C * self.R * self.S * self.P * self.Q


def _pair(v, name):
    t = (v, v) if np.isscalar(v) else tuple(v)
    if len(t) != 2:
        raise ValueError(f"conv2d: {name} must be an int or a pair, got {v!r}")
    return int(t[0]), int(t[1])


def geometry(x_shape, w_shape, stride=1, padding=0) -> ConvGeometry:
    """Output size and all other sizes of a convolution.

    Args:
        x_shape: (N, C, H, W); w_shape: (K, C, R, S).
        stride, padding: int or (vertical, horizontal) pair; stride >= 1, padding >= 0.

    Raises:
        ValueError: wrong number of dimensions, channel mismatch, bad stride or
            padding, or a kernel larger than the padded input.
    """
    if len(x_shape) != 4 or len(w_shape) != 4:
        raise ValueError(f"conv2d: x must be (N, C, H, W) and w (K, C, R, S); got {tuple(x_shape)} "
                         f"and {tuple(w_shape)}")
    N, C, H, W = (int(v) for v in x_shape)
    K, C2, R, S = (int(v) for v in w_shape)
    sh, sw = _pair(stride, "stride")
    ph, pw = _pair(padding, "padding")
    if C != C2:
        raise ValueError(f"conv2d: x has {C} channels, w expects {C2}")
    if sh < 1 or sw < 1 or ph < 0 or pw < 0:
        raise ValueError(f"conv2d: need stride >= 1 and padding >= 0, got stride {(sh, sw)}, "
                         f"padding {(ph, pw)}")
    if H + 2 * ph < R or W + 2 * pw < S:
        raise ValueError(f"conv2d: kernel {R}x{S} is larger than the padded input "
                         f"{H + 2 * ph}x{W + 2 * pw}")
    P = (H + 2 * ph - R) // sh + 1
    Q = (W + 2 * pw - S) // sw + 1
    return ConvGeometry(N, C, H, W, K, R, S, sh, sw, ph, pw, P, Q)


def use_direct(g: ConvGeometry) -> bool:
    """True when the forward uses the direct loop nest instead of im2col + BLAS:
    stride 1 and at most ``DIRECT_MAX_CRS`` weights per filter."""
    return g.sh == 1 and g.sw == 1 and g.C * g.R * g.S <= DIRECT_MAX_CRS


# --- a note on indices -----------------------------------------------------------------
# Numba gives arrays Python's semantics: a negative index counts from the end.
# For a signed index that LLVM cannot prove non-negative (like ``q*sw + s``) it
# inserts a select ``i < 0 ? i + n : i`` that stops the loop from vectorising
# (measured: 3-5x slower). Casting the innermost index to unsigned (``_u``) says
# "never negative" at no cost; the loops below then compile to AVX2/AVX-512
# code. Outer indices need no cast: their checks are hoisted out of the loop.
_u = np.uintp


@njit(parallel=True, cache=True, nogil=True)
def _pad(x, ph, pw, xp):
    """xp = x with ph zero rows above and below and pw zero columns left and right."""
    N, C, H, W = x.shape
    for nc in prange(N * C):
        n, c = nc // C, nc % C
        xp[n, c] = 0
        for h in range(H):
            for w in range(W):
                xp[n, c, ph + h, _u(pw + w)] = x[n, c, h, w]


def pad(x: np.ndarray, ph: int, pw: int) -> np.ndarray:
    """Zero-pad the last two axes of (N, C, H, W): (N, C, H + 2ph, W + 2pw).
    Once padded, every patch of the convolution lies inside the array, so the
    kernels need no boundary tests."""
    if ph == 0 and pw == 0:
        return np.ascontiguousarray(x)
    N, C, H, W = x.shape
    xp = np.empty((N, C, H + 2 * ph, W + 2 * pw), x.dtype)
    _pad(np.ascontiguousarray(x), ph, pw, xp)
    return xp


# --- im2col / col2im ---------------------------------------------------------------
@njit(parallel=True, cache=True, nogil=True)
def _im2col(xp, R, S, sh, sw, P, Q, cols):
    N, C = xp.shape[0], xp.shape[1]
    PQ = P * Q
    for nc in prange(N * C):          # one (image, channel) plane per task
        n, c = nc // C, nc % C
        for r in range(R):
            for s in range(S):
                row = (c * R + r) * S + s             # the weight w[:, c, r, s] ...
                for p in range(P):
                    dst = n * PQ + p * Q              # ... meets, for output row p,
                    for q in range(Q):                # input row p*sh + r, column q*sw + s
                        cols[row, _u(dst + q)] = xp[n, c, p * sh + r, _u(q * sw + s)]


@njit(parallel=True, cache=True, nogil=True)
def _col2im(cols, R, S, sh, sw, ph, pw, P, Q, gx):
    N, C, H, W = gx.shape
    PQ = P * Q
    for nc in prange(N * C):          # each task owns one plane of gx: no races
        n, c = nc // C, nc % C
        gxp = np.zeros((H + 2 * ph, W + 2 * pw), gx.dtype)   # padded plane, in cache
        for r in range(R):
            for s in range(S):
                row = (c * R + r) * S + s
                for p in range(P):
                    src = n * PQ + p * Q
                    for q in range(Q):
                        gxp[p * sh + r, _u(q * sw + s)] += cols[row, _u(src + q)]
        for h in range(H):            # the padding's share of the gradient is dropped
            for w in range(W):
                gx[n, c, h, w] = gxp[ph + h, _u(pw + w)]


def im2col(x: np.ndarray, g: ConvGeometry) -> np.ndarray:
    """Patches of ``x`` as columns: (C*R*S, N*P*Q), dtype of x.

    ``cols[(c*R + r)*S + s, (n*P + p)*Q + q] = x[n, c, p*sh - ph + r, q*sw - pw + s]``
    (0 in the padding). Row order matches ``w.reshape(K, C*R*S)``.
    """
    cols = np.empty((g.C * g.R * g.S, g.N * g.P * g.Q), dtype=x.dtype)
    _im2col(pad(x, g.ph, g.pw), g.R, g.S, g.sh, g.sw, g.P, g.Q, cols)
    return cols


def col2im(cols: np.ndarray, g: ConvGeometry) -> np.ndarray:
    """Adjoint of :func:`im2col`: add each column back into its patch.

    Args:
        cols: (C*R*S, N*P*Q).
    Returns:
        (N, C, H, W), dtype of cols; entries covered by several patches get the
        sum, padding positions are dropped.
    """
    gx = np.empty((g.N, g.C, g.H, g.W), dtype=cols.dtype)
    _col2im(np.ascontiguousarray(cols), g.R, g.S, g.sh, g.sw, g.ph, g.pw, g.P, g.Q, gx)
    return gx


# --- layout changes around the matrix products ---------------------------------------
@njit(parallel=True, cache=True, nogil=True)
def _knpq_to_nkpq_bias(y2, b, y):
    """y[n, k] = y2[k, n*PQ:(n+1)*PQ] + b[k]: matrix-product layout -> NCHW."""
    N, K, PQ = y.shape
    for nk in prange(N * K):
        n, k = nk // K, nk % K
        for j in range(PQ):
            y[n, k, j] = y2[k, _u(n * PQ + j)] + b[k]


@njit(parallel=True, cache=True, nogil=True)
def _nkpq_to_knpq_sum(gy, gy2, gb):
    """gy2[k, n*PQ + j] = gy[n, k, j] and gb[k] = sum of gy[:, k]: NCHW ->
    matrix-product layout, with the bias gradient computed on the way."""
    N, K, PQ = gy.shape
    for k in prange(K):
        # float64 partial sums, one per position j: the lanes are independent,
        # so the loop vectorises without reordering any single sum.
        acc = np.zeros(PQ, np.float64)
        for n in range(N):
            for j in range(PQ):
                v = gy[n, k, j]
                gy2[k, _u(n * PQ + j)] = v
                acc[j] += v
        gb[k] = acc.sum()


# --- direct forward (few input channels, stride 1) ----------------------------------------
@njit(parallel=True, cache=True, nogil=True)
def _direct_forward(xp, w, b, y):
    Hp, Wp = xp.shape[2], xp.shape[3]
    K, C, R, S = w.shape
    N, _, P, Q = y.shape
    # Flatten each padded plane (rows of length Wp). Output pixel (p, q) is
    # element i = p*Wp + q of a "wide" output plane, and tap (r, s) reads the
    # input at i + r*Wp + s: the same offset for every pixel. So one tap is
    # ONE long contiguous multiply-add over the plane (fast SIMD) instead of P
    # short rows. The wide plane also holds S-1 junk columns per row, dropped
    # at the end: (Wp - Q)/Q extra work, 7% at 28x28 with padding 1.
    L = (P - 1) * Wp + Q
    xf = xp.reshape(N, C, Hp * Wp)
    for nk in prange(N * K):          # one output plane per task, kept in cache
        n, k = nk // K, nk % K
        acc = np.empty(L, y.dtype)
        acc[:] = b[k]
        for c in range(C):
            for r in range(R):
                s = 0
                while s + 3 <= S:     # three taps per pass: the loop is limited by
                    o = r * Wp + s    # loads/stores of acc, not by arithmetic
                    w0, w1, w2 = w[k, c, r, s], w[k, c, r, s + 1], w[k, c, r, s + 2]
                    for i in range(L):
                        acc[i] += (w0 * xf[n, c, _u(i + o)] + w1 * xf[n, c, _u(i + o + 1)]
                                   + w2 * xf[n, c, _u(i + o + 2)])
                    s += 3
                while s < S:          # the taps left over when S is not a multiple of 3
                    o = r * Wp + s
                    wv = w[k, c, r, s]
                    for i in range(L):
                        acc[i] += wv * xf[n, c, _u(i + o)]
                    s += 1
        for p in range(P):            # keep the Q real columns of each wide row
            for q in range(Q):
                y[n, k, p, q] = acc[_u(p * Wp + q)]


# --- public entry points ----------------------------------------------------------------
def _check_dtypes(*arrays):
    dt = arrays[0].dtype
    if dt not in (np.float32, np.float64):
        raise TypeError(f"conv2d kernels take float32 or float64 arrays, got {dt}")
    for a in arrays[1:]:
        if a is not None and a.dtype != dt:
            raise TypeError(f"conv2d: mixed dtypes {dt} and {a.dtype}; convert first")


def conv2d_forward(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None,
                   stride=1, padding=0, *, direct: bool | None = None):
    """Convolution forward pass.

    Args:
        x: (N, C, H, W) float32 or float64.
        w: (K, C, R, S), same dtype.
        b: (K,) or None (no bias).
        stride, padding: int or (vertical, horizontal) pair.
        direct: force the direct loop nest (True, stride 1 only) or im2col +
            BLAS (False); default :func:`use_direct`.

    Returns:
        ``(y, saved)``: y (N, K, P, Q) of x's dtype, and what the backward pass
        needs (a dict: the geometry, and ``cols`` for im2col or ``xp``, the
        padded input, for the direct path).

    Raises:
        ValueError: inconsistent shapes (see :func:`geometry`), or
            ``direct=True`` with a stride other than 1.
        TypeError: dtypes other than float32/float64, or mixed.
    """
    g = geometry(x.shape, w.shape, stride, padding)
    _check_dtypes(x, w, b)
    x = np.ascontiguousarray(x)
    w = np.ascontiguousarray(w)
    b = np.zeros(g.K, x.dtype) if b is None else np.ascontiguousarray(b)
    y = np.empty((g.N, g.K, g.P, g.Q), dtype=x.dtype)
    if use_direct(g) if direct is None else direct:
        if (g.sh, g.sw) != (1, 1):
            raise ValueError("conv2d: the direct kernel needs stride 1; use direct=False")
        xp = pad(x, g.ph, g.pw)
        _direct_forward(xp, w, b, y)
        return y, {"geometry": g, "xp": xp, "direct": True}
    cols = im2col(x, g)
    y2 = w.reshape(g.K, -1) @ cols                      # (K, N*P*Q): the BLAS call
    _knpq_to_nkpq_bias(y2, b, y.reshape(g.N, g.K, -1))
    return y, {"geometry": g, "cols": cols, "direct": False}


def conv2d_backward_weight(gy2: np.ndarray, cols: np.ndarray, w_shape) -> np.ndarray:
    """dL/dw = gy2 @ cols.T, reshaped to (K, C, R, S).

    Args:
        gy2: dL/dy in matrix layout (K, N*P*Q); cols: (C*R*S, N*P*Q) from the forward.
    """
    return (gy2 @ cols.T).reshape(w_shape)


def conv2d_backward_data(gy2: np.ndarray, w: np.ndarray, g: ConvGeometry) -> np.ndarray:
    """dL/dx = col2im(w.reshape(K, -1).T @ gy2), shape (N, C, H, W)."""
    gcols = w.reshape(g.K, -1).T @ gy2                  # (C*R*S, N*P*Q)
    return col2im(gcols, g)


def conv2d_backward(gy: np.ndarray, w: np.ndarray, saved: dict,
                    need_x: bool = True, need_w: bool = True):
    """Gradients of the convolution.

    Args:
        gy: dL/dy, (N, K, P, Q), dtype of the forward's x.
        w: the weight used in the forward (K, C, R, S).
        saved: the second value returned by :func:`conv2d_forward`.
        need_x, need_w: skip the input or weight gradient when not needed
            (the first layer's input needs none: that halves its backward).

    Returns:
        ``(gx, gw, gb)``: (N, C, H, W) or None, (K, C, R, S) or None, (K,) or None
        (gb is computed when ``need_w``).
    """
    g = saved["geometry"]
    if gy.shape != (g.N, g.K, g.P, g.Q):
        raise ValueError(f"conv2d_backward: gy has shape {gy.shape}, expected {(g.N, g.K, g.P, g.Q)}")
    gy = np.ascontiguousarray(gy)
    w = np.ascontiguousarray(w)
    gx = gw = None
    if saved["direct"] and need_w:
        # The forward skipped im2col; for few channels it is cheap, so build it
        # now from the saved padded input and use the same BLAS products.
        cols = np.empty((g.C * g.R * g.S, g.N * g.P * g.Q), dtype=gy.dtype)
        _im2col(saved["xp"], g.R, g.S, g.sh, g.sw, g.P, g.Q, cols)
    elif need_w:
        cols = saved["cols"]
    gy2 = np.empty((g.K, g.N * g.P * g.Q), gy.dtype)
    gb = np.empty(g.K, gy.dtype)
    _nkpq_to_knpq_sum(gy.reshape(g.N, g.K, -1), gy2, gb)
    if need_w:
        gw = conv2d_backward_weight(gy2, cols, w.shape)
    else:
        gb = None
    if need_x:
        gx = conv2d_backward_data(gy2, w, g)
    return gx, gw, gb
