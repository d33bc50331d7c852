"""2-D convolution: forward, backward-data and backward-weight, channels-last.

Long because one job: the convolution kernels. The patch build, the products' blocking,
col2im and the fused epilogues share one layout and one geometry, and are read together.

Notation (used in every docstring and in ``docs/kernels.md``):

- input ``x``  (N, C, H, W): N images of C channels, H rows, W columns;
- weight ``w`` (K, C, R, S): K filters, each C x R x S;
- bias ``b``   (K,);
- stride ``(sh, sw)`` and zero padding ``(ph, pw)``;
- output ``y``  (N, K, P, Q) with ``P = (H + 2ph - R) // sh + 1`` and
  ``Q = (W + 2pw - S) // sw + 1``.

``y[n,k,p,q] = b[k] + sum_{c,r,s} w[k,c,r,s] * x[n, c, p*sh - ph + r, q*sw - pw + s]``
(a cross-correlation, as in every deep-learning library; x is 0 outside its border).

Shapes are NCHW; **memory is channels-last** (NHWC, see
:mod:`minips.kernels.layout`): the training path reads x as (N, H, W, C) and
returns y as an (N, P, Q, K) array viewed as (N, K, P, Q). The weights stay
(K, C, R, S) at the interface (checkpoints unchanged); each call copies them
to the (K, R*S*C) matrix the products use (18 K values for 32->64).

How it is computed (**im2col**, Chellapilla et al. 2006; Caffe), in NHWC:
copy the patch that output pixel (n, p, q) sees into one row of
``cols`` (N*P*Q, R*S*C), ordered (r, s, c): R*S contiguous runs of C values, or,
seen per tap row, R runs of S*C values, each contiguous in x too (how the patch
build copies one or a few channels, the first layer's input).
Then ``y = cols @ wm.T`` (one BLAS product, wm = w as (K, R*S*C)) *is* the
(N*P*Q, K) = NHWC output: no layout change. Backward: ``dW = gy.T @ cols``
over the same, kept ``cols``; ``dcols = gy @ wm``, and **col2im** adds each
row back into the pixels it was copied from (the gradient of x). The patch
build and the forward product, and the dX product and col2im, run a block of
images at a time (:data:`BLOCK_ROWS`, :data:`BLOCK_BYTES`), so each block is used
while in cache.

A **direct** loop nest vectorised over the K output channels
(:func:`_direct_nhwc`, no ``cols``) is kept for very few input channels
(``direct=True``, or C*R*S <= :data:`DIRECT_MAX_CRS`, 0 by default: measured
slower in training, where dW needs ``cols`` anyway); its backward uses the
same products.

After the forward product an **epilogue** adds the bias and, when the
layer is followed by them (``relu=True``, ``pool=(kh, kw)``), applies ReLU
and a non-overlapping max pooling in the same pass: the full-size
activation is then never written a second time. Its backward pass does the
reverse in one pass (scatter to the window's maximum, ReLU mask, bias
gradient) and hands the result to the two products.

Work buffers (cols, outputs, gradients) come from an ``arena`` (one per
layer and thread, :mod:`minips.kernels.arena`): reused at every step, not
allocated. Without one (the default) every call allocates, as NumPy does.

The NCHW :func:`im2col` / :func:`col2im` (columns = output pixels, the
textbook layout) are kept for teaching (tutorial 2) and tested like the rest.

The Numba kernels are parallel over independent pieces of the output (an
output row, an image), so threads never write the same element; all are
compiled with ``nogil=True``. All work for float32 and float64. Twins:
``minips.kernels.reference.conv2d_*``, ``im2col``, ``col2im``.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from numba import njit, prange

from .arena import NO_ARENA
from .layout import as_nchw, to_nhwc

__all__ = ["ConvGeometry", "geometry", "conv2d_forward", "conv2d_backward", "use_direct",
           "weight_matrix", "Stages", "im2col", "col2im", "im2col_nhwc", "col2im_nhwc", "DIRECT_MAX_CRS"]

#: Use the direct forward when C*R*S is at most this (0: never, the default).
#: Measured (issue 30, AMD EPYC Zen 3, AVX2, 1 thread, CPU time, the training
#: path with ReLU and pooling fused, batch 32 and 64): im2col + BLAS in blocks
#: was faster for the first layers, 7.2 against 7.9 ms (N64 1->32 28x28) and
#: 22 against 30 ms (N64 3->64 32x32): its patch matrix is built once and serves
#: the forward product and dW, where the direct forward still needs it for dW.
#: ``direct=True`` still selects the direct kernel; ``bench kernels --breakdown``
#: shows both stages for the first layer when this is raised to 27.
DIRECT_MAX_CRS = 0


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


def im2col_nhwc(x: np.ndarray, g: ConvGeometry) -> np.ndarray:
    """Patches of ``x`` as rows, channels-last: (N*P*Q, R*S*C), dtype of x.

    ``cols[(n*P + p)*Q + q, (r*S + s)*C + c] = x[n, c, p*sh - ph + r, q*sw - pw + s]``
    (0 in the padding); x is a logical (N, C, H, W) array in either layout.
    """
    cols = np.empty((g.N * g.P * g.Q, g.R * g.S * g.C), dtype=x.dtype)
    _im2col_nhwc(to_nhwc(x, NO_ARENA), g.R, g.S, g.sh, g.sw, g.ph, g.pw, g.P, g.Q, cols)
    return cols


def col2im_nhwc(cols: np.ndarray, g: ConvGeometry) -> np.ndarray:
    """Adjoint of :func:`im2col_nhwc`: (N, C, H, W) channels-last, dtype of cols."""
    gx = np.empty((g.N, g.H, g.W, g.C), dtype=cols.dtype)
    _col2im_nhwc(np.ascontiguousarray(cols), g.R, g.S, g.sh, g.sw, g.ph, g.pw, g.P, g.Q, gx)
    return as_nchw(gx)


# --- channels-last kernels (the training path) -------------------------------------------
#: Inputs with at most this many channels use :func:`_im2col_runs`, the others
#: :func:`_im2col_pixels`. Measured (issue 30, Zen 3, 1 thread, CPU time, N64, 3x3,
#: padding 1): runs 0.51 against 0.67 ms (C = 1) and 0.8-1.0 against 0.9-1.0 ms (C = 3)
#: for the same copy in pixel order; for C = 32 that order (as in _im2col_pixels)
#: was 1.4x faster than the runs (docs/kernels.md).
THIN_C = 4


def _im2col_nhwc(x, R, S, sh, sw, ph, pw, P, Q, cols):
    """cols[(n*P + p)*Q + q, (r*S + s)*C + c] = x[n, p*sh - ph + r, q*sw - pw + s, c], 0 in
    the padding; x (N, H, W, C) C-contiguous, cols (N*P*Q, R*S*C). One or few channels
    (C <= :data:`THIN_C`, the first layer): :func:`_im2col_runs`; else :func:`_im2col_pixels`."""
    (_im2col_runs if x.shape[3] <= THIN_C else _im2col_pixels)(x, R, S, sh, sw, ph, pw, P, Q, cols)


@njit(parallel=True, cache=True, nogil=True)
def _im2col_runs(x, R, S, sh, sw, ph, pw, P, Q, cols):
    """:func:`_im2col_nhwc` for few channels. In NHWC the S*C values that tap row r of
    output pixel (p, q) needs are one contiguous run of input row h = p*sh - ph + r from
    column w0 = q*sw - pw on, and they fill one contiguous run of cols' row: each run is
    copied whole (S*C = 3 or 9 values for a 3x3 kernel on 1 or 3 channels, where a copy
    per tap moved 1 or 3). Loop order: output rows (n, p) in parallel, then r, then q.
    The border is handled apart, so the interior needs no test: a row h in the padding is
    zero-filled; columns q0 <= q < q1 copy their runs straight; only the few columns whose
    run crosses the left or right edge test each pixel. No padded copy of x."""
    N, H, W, C = x.shape
    SC = S * C
    xr = x.reshape((N, H, W * C))                    # input rows as flat runs
    q0 = min(Q, (pw + sw - 1) // sw)                 # first q with w0 >= 0
    q1 = max(q0, min(Q, (W + pw - S) // sw + 1))     # first q with w0 + S > W
    for npp in prange(N * P):
        n, p = npp // P, npp % P
        row0 = npp * Q
        for r in range(R):
            h = p * sh - ph + r
            col0 = r * SC
            if h < 0 or h >= H:                      # the whole tap row is padding
                for q in range(Q):
                    for j in range(SC):
                        cols[row0 + q, _u(col0 + j)] = 0
                continue
            for q in range(q0, q1):                  # interior: one run, no test
                src = (q * sw - pw) * C
                for j in range(SC):
                    cols[row0 + q, _u(col0 + j)] = xr[n, h, _u(src + j)]
            for t in range(Q - (q1 - q0)):           # q < q0 or q >= q1: the run crosses an edge
                q = t if t < q0 else t + (q1 - q0)
                for s in range(S):
                    w = q * sw - pw + s
                    col = col0 + s * C
                    if 0 <= w < W:
                        for c in range(C):
                            cols[row0 + q, _u(col + c)] = x[n, h, w, _u(c)]
                    else:
                        for c in range(C):
                            cols[row0 + q, _u(col + c)] = 0


@njit(parallel=True, cache=True, nogil=True)
def _im2col_pixels(x, R, S, sh, sw, ph, pw, P, Q, cols):
    """:func:`_im2col_nhwc` for many channels. Loop order: output rows (n, p) in parallel,
    then q, r, s (each row of cols written in order); the innermost loop copies one
    pixel's C channels, contiguous in x and in cols. The border test is made once per
    pixel, not per value (no padded copy of x is needed)."""
    N, H, W, C = x.shape
    for npp in prange(N * P):
        n, p = npp // P, npp % P
        for q in range(Q):
            row = npp * Q + q
            for r in range(R):
                h = p * sh - ph + r
                for s in range(S):
                    w = q * sw - pw + s
                    col = (r * S + s) * C
                    if 0 <= h < H and 0 <= w < W:
                        for c in range(C):
                            cols[row, _u(col + c)] = x[n, h, w, _u(c)]
                    else:
                        for c in range(C):
                            cols[row, _u(col + c)] = 0


@njit(parallel=True, cache=True, nogil=True)
def _col2im_nhwc(gcols, R, S, sh, sw, ph, pw, P, Q, gx):
    """gx[n, h, w, :] = the sum of every block of C values of gcols that
    :func:`_im2col_nhwc` copied from pixel (n, h, w) (its adjoint). Scatter form, one
    image per task (the task owns that image's gx: no races): zero the image's
    gradient (in L2), then for each row of gcols (output pixel p, q) and tap (r, s)
    inside the image, add its C contiguous values into pixel (p*sh - ph + r,
    q*sw - pw + s); taps in the padding are dropped. Innermost loop over C."""
    N, H, W, C = gx.shape
    for n in prange(N):
        gx[n] = 0
        for p in range(P):
            for q in range(Q):
                row = (n * P + p) * Q + q
                for r in range(R):
                    h = p * sh - ph + r
                    if h < 0 or h >= H:
                        continue
                    for s in range(S):
                        w = q * sw - pw + s
                        if w < 0 or w >= W:
                            continue
                        col = (r * S + s) * C
                        for c in range(C):
                            gx[n, h, w, _u(c)] += gcols[row, _u(col + c)]


@njit(parallel=True, cache=True, nogil=True)
def _direct_nhwc(x, wt, b, ph, pw, y):
    """y[n, p, q, :] = b + sum over r, s, c of x[n, p - ph + r, q - pw + s, c] * wt[r, s, c, :]
    (stride 1); x (N, H, W, C), wt (R, S, C, K), y (N, P, Q, K). Loop order: output rows
    (n, p) in parallel, then q, r, s, c; the innermost loop runs over the K output
    channels, contiguous in wt and y: one input value times a row of K weights added into
    the pixel's K outputs (in L1), a vectorised multiply-add. No cols, no padded copy."""
    N, H, W, C = x.shape
    R, S, K = wt.shape[0], wt.shape[1], wt.shape[3]
    P, Q = y.shape[1], y.shape[2]
    for npp in prange(N * P):
        n, p = npp // P, npp % P
        for q in range(Q):
            for k in range(K):
                y[n, p, q, _u(k)] = b[_u(k)]
            for r in range(R):
                h = p - ph + r
                if h < 0 or h >= H:
                    continue
                for s in range(S):
                    w = q - pw + s
                    if w < 0 or w >= W:
                        continue
                    for c in range(C):
                        v = x[n, h, w, c]
                        for k in range(K):
                            y[n, p, q, _u(k)] += v * wt[r, s, c, _u(k)]


@njit(parallel=True, cache=True, nogil=True)
def _bias_relu(y, b, relu):
    """In place on y (M, K), the product's output: y[m, :] += b, then, if ``relu``,
    max(y, 0) (NaN passes, as in :mod:`minips.kernels.elementwise`). Parallel over rows."""
    M, K = y.shape
    for m in prange(M):
        for k in range(K):
            v = y[m, _u(k)] + b[_u(k)]
            if relu:
                v = 0 if v < 0 else v
            y[m, _u(k)] = v


@njit(parallel=True, cache=True, nogil=True)
def _bias_relu_maxpool(y, b, kh, kw, z, code):
    """z[n, i, j, :] = ReLU(the maximum over window (i, j) of y + b), windows of kh x kw,
    stride = window (they do not overlap); code[n, i, j, k] = the position a*kw + d in
    the window of that maximum (the first in row-major order on ties, as max pooling), or
    -1 when the result is not > 0 (the ReLU cuts: no gradient). y (N, P, Q, K), the
    product's output without bias; z, code (N, P2, Q2, K). Equal to bias, then ReLU, then
    max pooling, but y is read once and only the pooled result is written. Loop order:
    pooled rows (n, i) in parallel, then j, the window; innermost loop over K."""
    P2, Q2, K = z.shape[1], z.shape[2], z.shape[3]
    for ni in prange(z.shape[0] * P2):
        n, i = ni // P2, ni % P2
        for j in range(Q2):
            for k in range(K):
                z[n, i, j, _u(k)] = y[n, i * kh, j * kw, _u(k)] + b[_u(k)]
                code[n, i, j, _u(k)] = 0
            for a in range(kh):
                for d in range(kw):
                    if a + d == 0:
                        continue
                    pos = a * kw + d
                    for k in range(K):
                        v = y[n, i * kh + a, j * kw + d, _u(k)] + b[_u(k)]
                        take = v > z[n, i, j, _u(k)]          # strict: the first maximum wins
                        z[n, i, j, _u(k)] = v if take else z[n, i, j, _u(k)]
                        code[n, i, j, _u(k)] = pos if take else code[n, i, j, _u(k)]
            for k in range(K):
                v = z[n, i, j, _u(k)]
                code[n, i, j, _u(k)] = code[n, i, j, _u(k)] if v > 0 else -1
                z[n, i, j, _u(k)] = 0 if v < 0 else v


@njit(parallel=True, cache=True, nogil=True)
def _maxpool_relu_backward(gz, code, kh, kw, gy, gbn):
    """Backward of :func:`_bias_relu_maxpool`: gy[n, i*kh + a, j*kw + d, k] = gz[n, i, j, k]
    where code[n, i, j, k] == a*kw + d, else 0 (also rows and columns outside every
    window); gbn[n, :] = the sum of image n's gy (the bias gradient, per image, float64).
    gz, code (N, P2, Q2, K); gy (N, P, Q, K). Images in parallel; rows of gy are written
    in order; innermost loop over K."""
    N, P, Q, K = gy.shape
    P2, Q2 = gz.shape[1], gz.shape[2]
    for n in prange(N):
        for k in range(K):
            gbn[n, _u(k)] = 0
        for i in range(P2):
            for j in range(Q2):
                for k in range(K):
                    g = gz[n, i, j, _u(k)]
                    gbn[n, _u(k)] += g if code[n, i, j, _u(k)] >= 0 else 0
            for a in range(kh):
                h = i * kh + a
                for j in range(Q2):
                    for d in range(kw):
                        pos = a * kw + d
                        w = j * kw + d
                        for k in range(K):
                            gy[n, h, w, _u(k)] = gz[n, i, j, _u(k)] if code[n, i, j, _u(k)] == pos else 0
                for w in range(Q2 * kw, Q):
                    for k in range(K):
                        gy[n, h, w, _u(k)] = 0
        for h in range(P2 * kh, P):
            for w in range(Q):
                for k in range(K):
                    gy[n, h, w, _u(k)] = 0


@njit(parallel=True, cache=True, nogil=True)
def _relu_backward_sum(out, gz, gy, gbn):
    """Backward of bias + ReLU: gy = gz where out > 0, else 0; gbn[n, :] = the sum of
    image n's gy (float64). out, gz, gy (N, M, K) (M = P*Q pixels). Images in parallel."""
    N, M, K = gy.shape
    for n in prange(N):
        for k in range(K):
            gbn[n, _u(k)] = 0
        for m in range(M):
            for k in range(K):
                g = gz[n, m, _u(k)] if out[n, m, _u(k)] > 0 else 0
                gy[n, m, _u(k)] = g
                gbn[n, _u(k)] += g


@njit(parallel=True, cache=True, nogil=True)
def _bias_sum(gy, gbn):
    """gbn[n, :] = the sum over image n's pixels of gy (N, M, K), float64: the bias
    gradient per image. Independent lanes (one partial sum per channel) vectorise."""
    N, M, K = gy.shape
    for n in prange(N):
        for k in range(K):
            gbn[n, _u(k)] = 0
        for m in range(M):
            for k in range(K):
                gbn[n, _u(k)] += gy[n, m, _u(k)]


# --- public entry points ----------------------------------------------------------------
class Stages:
    """Seconds spent in each stage of :func:`conv2d_forward` / :func:`conv2d_backward`
    (``bench kernels --breakdown``): pass one as ``stages=``; ``seconds[name]`` adds up;
    ``work[name]`` adds up the fraction of the layer's batch each lap covered (a stage run
    block by block over the images adds to 1; a patch build again in the backward, to 2).

    The stages: "layout in" (an NCHW input or gradient copied to NHWC), "weights"
    (the weight copied to or from the products' layout), "patch build" (im2col),
    "GEMM fwd", "direct conv", "epilogue fwd" (bias, ReLU, pooling), "epilogue bwd"
    (their backward and the bias gradient), "GEMM dW", "GEMM dX", "col2im".
    """

    def __init__(self, clock=time.perf_counter):
        self.clock, self.seconds, self.work, self._t = clock, {}, {}, 0.0

    def start(self):
        self._t = self.clock()

    def lap(self, name: str, share: float = 1.0):
        t = self.clock()
        self.seconds[name] = self.seconds.get(name, 0.0) + (t - self._t)
        self.work[name] = self.work.get(name, 0.0) + share
        self._t = t


class _NoStages:
    def start(self):
        pass

    def lap(self, name, share=1.0):
        pass


_NO_STAGES = _NoStages()


def _check_dtypes(*arrays):
    dt = arrays[0].dtype
    if dt not in (np.float32, np.float64):
        raise TypeError(f"conv2d kernels take float32 or float64 arrays, got {dt}")
    for a in arrays[1:]:
        if a is not None and a.dtype != dt:
            raise TypeError(f"conv2d: mixed dtypes {dt} and {a.dtype}; convert first")


def _pool_window(pool, g: ConvGeometry):
    kh, kw = _pair(pool, "pool")
    if kh < 1 or kw < 1 or kh > g.P or kw > g.Q:
        raise ValueError(f"conv2d: pool window {kh}x{kw} must be >= 1 and at most the output {g.P}x{g.Q}")
    return kh, kw


#: Rows of ``cols`` (output pixels) per block in the forward's patch build + product
#: and the backward's product + col2im (whole images; at least one). 0: one block.
BLOCK_ROWS = 1024
#: ... or more rows, up to this many bytes of ``cols``, when its rows are short (few
#: input channels): each block costs two calls (patch build, product).
BLOCK_BYTES = 256 * 1024


def _blocks(g: ConvGeometry, itemsize: int = 4):
    """``(r0, r1, n0, n1)``: images n0..n1-1, rows r0..r1-1 of cols, about
    max(:data:`BLOCK_ROWS`, :data:`BLOCK_BYTES` / bytes of a row of cols) rows each."""
    PQ = g.P * g.Q
    rows = max(BLOCK_ROWS, BLOCK_BYTES // (g.R * g.S * g.C * itemsize))
    per = g.N if BLOCK_ROWS <= 0 else max(1, rows // PQ)
    for n0 in range(0, g.N, per):
        n1 = min(g.N, n0 + per)
        yield n0 * PQ, n1 * PQ, n0, n1


def weight_matrix(w: np.ndarray, arena=NO_ARENA) -> np.ndarray:
    """w (K, C, R, S) as the (K, R*S*C) matrix of the channels-last products
    (columns in the order (r, s, c) of a row of ``cols``)."""
    K, C, R, S = w.shape
    wm = arena.take((K, R * S * C), w.dtype)
    np.copyto(wm.reshape(K, R, S, C), w.transpose(0, 2, 3, 1))
    return wm


def conv2d_forward(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None,
                   stride=1, padding=0, *, direct: bool | None = None, relu: bool = False,
                   pool=None, arena=NO_ARENA, stages=None):
    """Convolution forward pass, optionally followed (fused) by ReLU and max pooling.

    Args:
        x: (N, C, H, W) float32 or float64, NCHW or channels-last memory.
        w: (K, C, R, S), same dtype.
        b: (K,) or None (no bias).
        stride, padding: int or (vertical, horizontal) pair.
        direct: force the direct loop nest (True, stride 1 only) or im2col +
            BLAS (False); default :func:`use_direct`.
        relu: apply ReLU to the result (fused into the bias pass).
        pool: None, or a max-pooling window (int or (kh, kw), stride = window,
            needs ``relu``) applied after the ReLU, in the same pass.
        arena: where work buffers and the result come from
            (:class:`minips.kernels.arena.Arena`); default: fresh arrays.
        stages: a :class:`Stages` to time each stage in (benchmarks).

    Returns:
        ``(y, saved)``: y (N, K, P, Q) of x's dtype, channels-last memory
        (pooled: (N, K, P // kh, Q // kw)); ``saved``, what
        :func:`conv2d_backward` needs (a dict: the geometry, ``cols``, the
        weight matrix, the ReLU/pool state).

    Raises:
        ValueError: inconsistent shapes (see :func:`geometry`), ``direct=True``
            with a stride other than 1, a pool window that does not fit, or
            ``pool`` without ``relu``.
        TypeError: dtypes other than float32/float64, or mixed.
    """
    g = geometry(x.shape, w.shape, stride, padding)
    _check_dtypes(x, w, b)
    direct = use_direct(g) if direct is None else direct
    if direct and (g.sh, g.sw) != (1, 1):
        raise ValueError("conv2d: the direct kernel needs stride 1; use direct=False")
    if pool is not None and not relu:
        raise ValueError("conv2d: the fused max pooling follows a ReLU; pass relu=True")
    window = _pool_window(pool, g) if pool is not None else None
    dt = x.dtype
    st = stages or _NO_STAGES
    st.start()
    xh = to_nhwc(x, arena)                                      # (N, H, W, C)
    st.lap("layout in")
    bias = arena.zeros((g.K,), dt) if b is None else np.ascontiguousarray(b)
    y = arena.take((g.N, g.P, g.Q, g.K), dt)
    y2 = y.reshape(-1, g.K)                                     # (N*P*Q, K)
    saved = {"geometry": g, "direct": direct, "x": xh, "cols": None, "wm": None,
             "relu": relu, "pool": window}
    if direct:
        wt = arena.take((g.R, g.S, g.C, g.K), dt)
        np.copyto(wt, w.transpose(2, 3, 1, 0))
        st.lap("weights")
        _direct_nhwc(xh, wt, bias, g.ph, g.pw, y)
        bias = arena.zeros((g.K,), dt)                          # added already
        st.lap("direct conv")
    else:
        cols = arena.take((g.N * g.P * g.Q, g.R * g.S * g.C), dt)
        wm = weight_matrix(w, arena)
        st.lap("weights")
        # a block of images at a time: its patches are multiplied while still in cache
        for r0, r1, n0, n1 in _blocks(g, np.dtype(dt).itemsize):
            _im2col_nhwc(xh[n0:n1], g.R, g.S, g.sh, g.sw, g.ph, g.pw, g.P, g.Q, cols[r0:r1])
            st.lap("patch build", (n1 - n0) / g.N)
            np.matmul(cols[r0:r1], wm.T, out=y2[r0:r1])          # the BLAS call: NHWC out
            st.lap("GEMM fwd", (n1 - n0) / g.N)
        saved["cols"], saved["wm"] = cols, wm
    if window is not None:
        kh, kw = window
        z = arena.take((g.N, g.P // kh, g.Q // kw, g.K), dt)
        # int32, not int8: with int8 the selects below did not vectorise (measured
        # 10 ms instead of 0.9 ms for N64 32 channels 28x28, one thread)
        code = arena.take(z.shape, np.int32)
        _bias_relu_maxpool(y, bias, kh, kw, z, code)
        st.lap("epilogue fwd")
        saved["code"] = code
        return as_nchw(z), saved
    if relu or not direct:
        _bias_relu(y2, bias, relu)
        st.lap("epilogue fwd")
    if relu:
        saved["out"] = y
    return as_nchw(y), saved


def conv2d_backward(gy: np.ndarray, w: np.ndarray, saved: dict,
                    need_x: bool = True, need_w: bool = True, arena=NO_ARENA, stages=None):
    """Gradients of the convolution (and of the fused ReLU and pooling).

    Args:
        gy: dL/dy, the shape of the forward's result (pooled when it pooled),
            dtype of the forward's x, either memory layout.
        w: the weight used in the forward (K, C, R, S).
        saved: the second value returned by :func:`conv2d_forward`.
        need_x, need_w: skip the input or weight gradient when not needed
            (the first layer's input needs none: that halves its backward).
        arena, stages: as in :func:`conv2d_forward`.

    Returns:
        ``(gx, gw, gb)``: (N, C, H, W) channels-last or None, (K, C, R, S) or
        None, (K,) or None (gb is computed when ``need_w``).

    Raises:
        ValueError: gy of the wrong shape.
    """
    g = saved["geometry"]
    window = saved["pool"]
    want = (g.N, g.K, g.P // window[0], g.Q // window[1]) if window else (g.N, g.K, g.P, g.Q)
    if gy.shape != want:
        raise ValueError(f"conv2d_backward: gy has shape {gy.shape}, expected {want}")
    dt = gy.dtype
    st = stages or _NO_STAGES
    st.start()
    gz = to_nhwc(gy, arena)
    st.lap("layout in")
    gx = gw = gb = None
    # 1. the gradient at the product's output, G (N*P*Q, K), with the bias gradient
    gbn = arena.take((g.N, g.K), np.float64)
    if window is not None:
        G = arena.take((g.N, g.P, g.Q, g.K), dt)
        _maxpool_relu_backward(gz, saved["code"], window[0], window[1], G, gbn)
    elif saved["relu"]:
        G = arena.take((g.N, g.P, g.Q, g.K), dt)
        _relu_backward_sum(saved["out"].reshape(g.N, -1, g.K), gz.reshape(g.N, -1, g.K),
                           G.reshape(g.N, -1, g.K), gbn)
    else:
        G = gz
        if need_w:
            _bias_sum(G.reshape(g.N, -1, g.K), gbn)
    st.lap("epilogue bwd")
    G2 = G.reshape(-1, g.K)
    cols = saved["cols"]
    if need_w:
        gb = gbn.sum(axis=0).astype(dt)
        if cols is None:          # direct forward, or a second backward: build it again
            cols = arena.take((g.N * g.P * g.Q, g.R * g.S * g.C), dt)
            _im2col_nhwc(saved["x"], g.R, g.S, g.sh, g.sw, g.ph, g.pw, g.P, g.Q, cols)
            st.lap("patch build")
        # 2. dW = G.T @ cols: (K, R*S*C), back to (K, C, R, S)
        gw2 = arena.take((g.K, g.R * g.S * g.C), dt)
        np.matmul(G2.T, cols, out=gw2)
        st.lap("GEMM dW")
        gw = arena.take((g.K, g.C, g.R, g.S), dt)
        np.copyto(gw, gw2.reshape(g.K, g.R, g.S, g.C).transpose(0, 3, 1, 2))
        st.lap("weights")
    if need_x:
        # 3. dcols = G @ wm, written over cols (its last use was dW above), then col2im
        wm = saved["wm"] if saved["wm"] is not None else weight_matrix(w, arena)
        if cols is None:
            cols = arena.take((g.N * g.P * g.Q, g.R * g.S * g.C), dt)
        saved["cols"] = None      # consumed: a second backward rebuilds it from x
        gxh = arena.take((g.N, g.H, g.W, g.C), dt)
        st.lap("weights")
        # a block of images at a time: its patch gradients are added back while in cache
        for r0, r1, n0, n1 in _blocks(g, np.dtype(dt).itemsize):
            np.matmul(G2[r0:r1], wm, out=cols[r0:r1])
            st.lap("GEMM dX", (n1 - n0) / g.N)
            _col2im_nhwc(cols[r0:r1], g.R, g.S, g.sh, g.sw, g.ph, g.pw, g.P, g.Q, gxh[n0:n1])
            st.lap("col2im", (n1 - n0) / g.N)
        gx = as_nchw(gxh)
    return gx, gw, gb
