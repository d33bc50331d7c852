"""LSTM over a whole sequence: the forward pass and backpropagation through time.

One LSTM layer (Hochreiter & Schmidhuber 1997, with the forget gate of Gers,
Schmidhuber & Cummins 2000) maps inputs ``x_t`` (N, F) and the previous state
``(h_{t-1}, c_{t-1})`` (N, H) to::

    z_t = x_t @ W_ih.T + h_{t-1} @ W_hh.T + b          (N, 4H) pre-activations
    i = sigmoid(z[:, 0:H])    input gate      f = sigmoid(z[:, H:2H])  forget gate
    g = tanh(z[:, 2H:3H])     candidate       o = sigmoid(z[:, 3H:4H]) output gate
    c_t = f * c_{t-1} + i * g
    h_t = o * tanh(c_t)

The gate order along the 4H axis is **(i, f, g, o)**, as in PyTorch's
``nn.LSTM`` (so weights can be copied across; PyTorch has two biases
``b_ih + b_hh`` where we have one ``b``).

Where the time goes, and how it is split:

- the matrix products are NumPy's BLAS GEMMs: the input part of ``z`` for
  *all* T steps is one (T*N, F) x (F, 4H) GEMM; only the recurrent part
  ``h_{t-1} @ W_hh.T`` must wait for the previous step;
- everything elementwise in one step (add both parts and the bias, five
  activations, the cell update) is one Numba kernel, :func:`step_forward`, so
  each of ``z``, ``c`` and ``h`` is read and written once;
- backpropagation through time (:func:`lstm_backward`) walks the steps in
  reverse: a fused Numba kernel (:func:`step_backward`) gives ``dz_t`` and
  the cell gradient for step t-1, one GEMM carries the gradient to
  ``h_{t-1}``, and after the loop the gradients of the inputs and weights of
  all steps are three large GEMMs.

The loop over the T steps is Python (a few microseconds per step): Numba's
own ``np.dot`` binds to SciPy's BLAS, measured 20% slower here than NumPy's.
``docs/lstm.md`` derives every line of the backward pass.

Activations: float64 uses the exact ``np.tanh`` (gradient checks); float32 uses
a rational minimax approximation of tanh (the one of Eigen, XLA and ONNX
Runtime MLAS, max error 2.5e-7) that the compiler turns into AVX instructions,
more than 10x faster than calling libm per element; ``sigmoid(x) = (1 + tanh(x/2)) / 2``.

Twins: :func:`minips.kernels.reference.lstm_forward` / ``lstm_backward`` and,
per step, ``step_forward`` / ``step_backward``.
"""
from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.extending import overload

__all__ = ["lstm_forward", "lstm_backward", "step_forward", "step_backward", "tanh", "sigmoid"]

# error_model="numpy": no Python ZeroDivisionError check inside loops (it
# would stop the vectorizer); fastmath lets LLVM reassociate and use FMA.
_FAST = dict(fastmath=True, error_model="numpy", cache=True, nogil=True)

# Constants typed float32: a Python literal (1, 0.5) is float64 in Numba and
# would silently promote float32 arithmetic to float64. Both are exact in
# float32, so float64 kernels lose nothing.
ONE = np.float32(1.0)
HALF = np.float32(0.5)


# --- activations ----------------------------------------------------------------
def tanh(x):
    """Hyperbolic tangent of a scalar: ``np.tanh`` in float64, a fast rational
    approximation (abs. error < 3e-7) in float32 inside Numba kernels."""
    return np.tanh(x)


@njit(inline="always", **_FAST)
def _tanh_float32(x):
    # tanh(x) ~ x * P(x^2) / Q(x^2), degrees 6/3 in x^2; clamped at |x| = 9
    # where tanh is 1 in float32. Coefficients: Eigen, generic_fast_tanh_float.
    x = np.float32(9.0) if x > np.float32(9.0) else x
    x = np.float32(-9.0) if x < np.float32(-9.0) else x
    x2 = x * x
    p = x2 * np.float32(-2.76076847742355e-16) + np.float32(2.00018790482477e-13)
    p = p * x2 + np.float32(-8.60467152213735e-11)
    p = p * x2 + np.float32(5.12229709037114e-08)
    p = p * x2 + np.float32(1.48572235717979e-05)
    p = p * x2 + np.float32(6.37261928875436e-04)
    p = p * x2 + np.float32(4.89352455891786e-03)
    q = x2 * np.float32(1.19825839466702e-06) + np.float32(1.18534705686654e-04)
    q = q * x2 + np.float32(2.26843463243900e-03)
    q = q * x2 + np.float32(4.89352518554385e-03)
    return x * p / q


@overload(tanh)
def _tanh_by_dtype(x):
    # Chosen when a kernel is compiled, from the argument's type.
    if x == types.float32:
        return lambda x: _tanh_float32(x)
    return lambda x: np.tanh(x)


@njit(inline="always", **_FAST)
def sigmoid(x):
    """Logistic function ``1 / (1 + e^-x)`` written as ``(1 + tanh(x/2)) / 2``
    (an identity): one tanh, no overflow for any x."""
    return HALF * tanh(HALF * x) + HALF


# --- one time step, elementwise ------------------------------------------------------
# Each helper is one simple loop over a contiguous row, which LLVM turns into
# AVX instructions. (One loop body touching many arrays at four offsets is not
# vectorized: the compiler cannot prove the writes do not overlap the reads.)
@njit(**_FAST)
def _add_sigmoid(z, zh, b):
    for j in range(z.size):
        z[j] = sigmoid(z[j] + zh[j] + b[j])


@njit(**_FAST)
def _add_tanh(z, zh, b):
    for j in range(z.size):
        z[j] = tanh(z[j] + zh[j] + b[j])


@njit(**_FAST)
def _cell_update(i, f, g, o, c_prev, c, tanh_c, h):
    for j in range(c.size):
        cj = f[j] * c_prev[j] + i[j] * g[j]
        tc = tanh(cj)
        c[j] = cj
        tanh_c[j] = tc
        h[j] = o[j] * tc


@njit(**_FAST)
def step_forward(z, zh, b, c_prev, c, tanh_c, h):
    """One forward step, fused: add, activate, update the cell.

    z (N, 4H): the input part ``x_t @ W_ih.T`` on entry, the activated gates
    (i, f, g, o) on exit. zh (N, 4H): the recurrent part ``h_{t-1} @ W_hh.T``.
    b (4H,). c_prev (N, H). Writes c, tanh_c, h (N, H).
    Twin: :func:`minips.kernels.reference.step_forward`.
    """
    n, hidden = c.shape
    for r in range(n):
        zr, zhr = z[r], zh[r]
        _add_sigmoid(zr[:2 * hidden], zhr[:2 * hidden], b[:2 * hidden])  # i, f
        _add_tanh(zr[2 * hidden:3 * hidden], zhr[2 * hidden:3 * hidden], b[2 * hidden:3 * hidden])  # g
        _add_sigmoid(zr[3 * hidden:], zhr[3 * hidden:], b[3 * hidden:])  # o
        _cell_update(zr[:hidden], zr[hidden:2 * hidden], zr[2 * hidden:3 * hidden], zr[3 * hidden:],
                     c_prev[r], c[r], tanh_c[r], h[r])


@njit(**_FAST)
def _cell_backward(i, f, g, o, c_prev, tanh_c, dh_out, dh, dc, di, df, dg, do):
    for j in range(dc.size):
        dhj = dh_out[j] + dh[j]                          # two paths reach h_t
        tc = tanh_c[j]
        dcj = dc[j] + dhj * o[j] * (ONE - tc * tc)       # h = o * tanh(c)
        di[j] = dcj * g[j] * i[j] * (ONE - i[j])         # c = f * c_prev + i * g,
        df[j] = dcj * c_prev[j] * f[j] * (ONE - f[j])    # then through each
        dg[j] = dcj * i[j] * (ONE - g[j] * g[j])         # gate's activation
        do[j] = dhj * tc * o[j] * (ONE - o[j])
        dc[j] = dcj * f[j]                               # on to c_{t-1}


@njit(**_FAST)
def step_backward(gates, c_prev, tanh_c, dh_out, dh, dc, dz):
    """One backward step, fused (derivation in docs/lstm.md).

    gates (N, 4H): the step's activated (i, f, g, o). c_prev, tanh_c (N, H).
    dh_out (N, H): gradient of the loss w.r.t. the output h_t from above.
    dh (N, H): gradient reaching h_t from step t+1 (read only).
    dc (N, H): gradient reaching c_t; overwritten with that of c_{t-1}.
    Writes dz (N, 4H), the gradient w.r.t. the pre-activations z_t.
    Twin: :func:`minips.kernels.reference.step_backward`.
    """
    n, hidden = dc.shape
    for r in range(n):
        gr, dzr = gates[r], dz[r]
        _cell_backward(gr[:hidden], gr[hidden:2 * hidden], gr[2 * hidden:3 * hidden], gr[3 * hidden:],
                       c_prev[r], tanh_c[r], dh_out[r], dh[r], dc[r],
                       dzr[:hidden], dzr[hidden:2 * hidden], dzr[2 * hidden:3 * hidden], dzr[3 * hidden:])


# --- the whole sequence: Python drives the steps, BLAS does the products ----------------
def _c(a, dtype):
    return np.ascontiguousarray(a, dtype=dtype)


def lstm_forward(x, w_ih, w_hh, b, h0=None, c0=None):
    """Run an LSTM layer over a whole sequence.

    Args:
        x: inputs, (T, N, F) float32 or float64 (every other array is cast to
           x's dtype).
        w_ih: input weights, (4H, F), gate blocks in the order (i, f, g, o).
        w_hh: recurrent weights, (4H, H).
        b: bias, (4H,).
        h0, c0: initial hidden and cell state, (N, H); None means zeros.

    Returns:
        ``(h, c, gates, tanh_c)``: hidden states h (T, N, H) (the layer's
        output; ``h[-1]`` is h_n), cell states c (T, N, H), the activated gates
        (T, N, 4H) and tanh(c) (T, N, H). The last three are what
        :func:`lstm_backward` needs.

    Shapes are checked by the caller (:class:`minips.nn.LSTM`); here they
    must already agree.
    """
    dt = x.dtype
    x, w_ih, w_hh, b = _c(x, dt), _c(w_ih, dt), _c(w_hh, dt), _c(b, dt)
    steps, n, features = x.shape
    four_h, hidden = w_hh.shape
    h0 = np.zeros((n, hidden), dt) if h0 is None else _c(h0, dt)
    c0 = np.zeros((n, hidden), dt) if c0 is None else _c(c0, dt)
    gates = np.empty((steps, n, four_h), dt)
    c = np.empty((steps, n, hidden), dt)
    tanh_c, h = np.empty_like(c), np.empty_like(c)
    zh = np.empty((n, four_h), dt)
    # The input part of every step's pre-activations: one big GEMM.
    np.matmul(x.reshape(steps * n, features), w_ih.T, out=gates.reshape(steps * n, four_h))
    for t in range(steps):
        h_prev, c_prev = (h0, c0) if t == 0 else (h[t - 1], c[t - 1])
        np.matmul(h_prev, w_hh.T, out=zh)  # the recurrent part waits for h_{t-1}
        step_forward(gates[t], zh, b, c_prev, c[t], tanh_c[t], h[t])
    return h, c, gates, tanh_c


def lstm_backward(dh_out, dh_n, dc_n, x, w_ih, w_hh, h0, c0, h, c, gates, tanh_c):
    """Backpropagation through time for :func:`lstm_forward`.

    Walks the steps from last to first: a fused Numba step gives dz_t, one
    GEMM carries the gradient to h_{t-1}; then the gradients of the inputs and
    weights for all steps at once are three large GEMMs.

    Args:
        dh_out: gradient of the loss w.r.t. the outputs h, (T, N, H).
        dh_n, dc_n: gradients w.r.t. the final state h_n = h[-1] and c_n = c[-1],
            (N, H), or None for zeros. (dh_n adds to dh_out[-1].)
        x, w_ih, w_hh, h0, c0: the forward's inputs (h0, c0 may be None).
        h, c, gates, tanh_c: the forward's outputs.

    Returns:
        ``(dx, dh0, dc0, dw_ih, dw_hh, db)`` with the shapes of x, h0, c0
        ((N, H) even when h0/c0 were None), w_ih, w_hh and b (4H,).
    """
    dt = x.dtype
    x, w_ih, w_hh = _c(x, dt), _c(w_ih, dt), _c(w_hh, dt)
    steps, n, features = x.shape
    four_h, hidden = w_hh.shape
    dh_out = _c(dh_out, dt)
    dh = np.zeros((n, hidden), dt) if dh_n is None else np.array(dh_n, dt)  # copies: updated below
    dc = np.zeros((n, hidden), dt) if dc_n is None else np.array(dc_n, dt)
    h0 = np.zeros((n, hidden), dt) if h0 is None else _c(h0, dt)
    c0 = np.zeros((n, hidden), dt) if c0 is None else _c(c0, dt)
    dz = np.empty_like(gates)
    for t in range(steps - 1, -1, -1):
        c_prev = c0 if t == 0 else c[t - 1]
        step_backward(gates[t], c_prev, tanh_c[t], dh_out[t], dh, dc, dz[t])
        np.matmul(dz[t], w_hh, out=dh)  # z_t depends on h_{t-1} through W_hh
    # Summed over all steps, each is one GEMM over (T*N) rows.
    dz_all = dz.reshape(steps * n, four_h)
    h_prev = np.concatenate([h0[None], h[:-1]]).reshape(steps * n, hidden)  # h_{t-1} of every step
    dx = (dz_all @ w_ih).reshape(steps, n, features)
    dw_ih = dz_all.T @ x.reshape(steps * n, features)
    dw_hh = dz_all.T @ h_prev
    db = dz_all.sum(axis=0)
    return dx, dh, dc, dw_ih, dw_hh, db
