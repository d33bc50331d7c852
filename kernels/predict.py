"""Fused kernels of the gradient predictors (pseudo-synchronous SGD).

The predictors' arithmetic is elementwise over all n weights plus a few inner
products. Written as NumPy expressions it makes ~25 passes over n floats with
a temporary each (4.4 ms of CPU per step for the 422k-weight ConvNet, as much
as a sixth of its training step); fused, it is two passes.

- :func:`arrival_sums`: when the true gradient G_j arrives, the inner products
  that score the forecast made for step j and feed AESP's confidence regression (step 3).
- :func:`aesp_step`: AESP's steps 2 and 1 for one arrival, in that order, in one
  pass (the rule and why this order: :meth:`AdaptivePredictor.forecast
  <minips.distributed.algorithms.predictors.AdaptivePredictor.forecast>`)::

      c = h * (w_now - w_then)                    2. correction, with h from BEFORE G
      F = G + lambda * c                             forecast
      dG = G - G_prev;  dw = w_then - w_prev      1. secant between consecutive arrivals
      Sgw = rho Sgw + (1-rho) dG dw;  Sww = rho Sww + (1-rho) dw dw
      h = clip(Sgw / (Sww + eps), 0, h_max)
      G_prev = G;  w_prev = w_then

- :func:`local_step`: the local-anchored forecast of ``local`` and
  ``adaptive-local`` (:mod:`minips.distributed.algorithms.local_predictors`)
  in one pass, with the inner products of lambda's regression::

      c = g_new - g_old                             local change g_t - g_{t-k}
      d = G + lam_new * g_new - lam_old * g_old     direction (= G + lambda c when
                                                    lam_new = lam_old = lambda)
      q = <G, c>;  cc = <c, c>;  r = <G, c_old>      regression sums (float64)
      c_old = c                                     (in place, when sums are asked for)

Twins: :func:`minips.kernels.reference.arrival_sums`,
:func:`minips.kernels.reference.aesp_step`, :func:`minips.kernels.reference.local_step`. Inner products accumulate in
float64. float32 vectors of equal length; serial loops (one thread per rank is
the common case, and the loops are memory-bound).
"""
from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["arrival_sums", "aesp_step", "local_step"]


@njit(cache=True, nogil=True)
def _forecast_sums(G, G_naive, F):
    fg = ff = gg = fe = ne = 0.0          # float64 accumulators
    for i in range(G.size):
        g, f, gn = np.float64(G[i]), np.float64(F[i]), np.float64(G_naive[i])
        fg += f * g
        ff += f * f
        gg += g * g
        fe += (f - g) * (f - g)
        ne += (gn - g) * (gn - g)
    return fg, ff, gg, fe, ne


@njit(cache=True, nogil=True)
def _forecast_sums_with_correction(G, G_naive, F, c):
    fg = ff = gg = fe = ne = ac = cc = 0.0
    for i in range(G.size):
        g, f, gn, ci = np.float64(G[i]), np.float64(F[i]), np.float64(G_naive[i]), np.float64(c[i])
        fg += f * g
        ff += f * f
        gg += g * g
        fe += (f - g) * (f - g)
        ne += (gn - g) * (gn - g)
        ac += (g - gn) * ci               # <what the naive forecast missed, correction>
        cc += ci * ci
    return fg, ff, gg, fe, ne, ac, cc


def arrival_sums(G: np.ndarray, G_naive: np.ndarray, F: np.ndarray, c: np.ndarray | None = None) -> dict:
    """Inner products for scoring the forecast F of step j against the arrived G_j.

    Args:
        G: float32 (n,), the gradient G_j that arrived.
        G_naive: float32 (n,), G_{j-k}, what the naive forecast used.
        F: float32 (n,), the forecast that was applied at step j.
        c: float32 (n,) correction applied at step j (AESP), or None.

    Returns:
        dict of float64 sums: ``FG`` <F,G>, ``FF`` <F,F>, ``GG`` <G,G>,
        ``err`` ||F-G||^2, ``naive_err`` ||G_naive-G||^2, and with ``c``:
        ``ac`` <G-G_naive, c>, ``cc`` <c,c>.

    Raises:
        ValueError: lengths differ.
    """
    n = G.size
    for name, v in (("G_naive", G_naive), ("F", F)) + ((("c", c),) if c is not None else ()):
        if v.size != n:
            raise ValueError(f"arrival_sums: {name} has {v.size} elements, G has {n}")
    G, G_naive, F = G.reshape(-1), G_naive.reshape(-1), F.reshape(-1)
    if c is None:
        fg, ff, gg, fe, ne = _forecast_sums(G, G_naive, F)
        return {"FG": fg, "FF": ff, "GG": gg, "err": fe, "naive_err": ne}
    fg, ff, gg, fe, ne, ac, cc = _forecast_sums_with_correction(G, G_naive, F, c.reshape(-1))
    return {"FG": fg, "FF": ff, "GG": gg, "err": fe, "naive_err": ne, "ac": ac, "cc": cc}


@njit(cache=True, nogil=True)
def _aesp_step(G, w_now, w_then, G_prev, w_prev, Sgw, Sww, h, lam, rho, eps, h_max, F, c):
    # All constants float32: an int or float64 constant here would promote the
    # arithmetic to float64 and make the loop 4x slower (measured).
    one_minus_rho = np.float32(1) - rho
    zero = np.float32(0)
    for i in range(G.size):
        ci = h[i] * (w_now[i] - w_then[i])      # step 2: correction, with h from before G
        c[i] = ci
        F[i] = G[i] + lam * ci
        dG = G[i] - G_prev[i]                   # step 1: fold G into the curvature
        dw = w_then[i] - w_prev[i]
        Sgw[i] = rho * Sgw[i] + one_minus_rho * dG * dw
        Sww[i] = rho * Sww[i] + one_minus_rho * dw * dw
        h[i] = min(max(Sgw[i] / (Sww[i] + eps), zero), h_max)
        G_prev[i] = G[i]
        w_prev[i] = w_then[i]


def aesp_step(G, w_now, w_then, G_prev, w_prev, Sgw, Sww, h, lam: float, rho: float, eps: float,
              h_max: float):
    """AESP's forecast (step 2) and then curvature update (step 1) for one arrival, in one pass.

    Args:
        G, w_now, w_then: float32 (n,): the arrived G_{t-k}, the current weights
            w_t and the weights w_{t-k} it was computed at.
        G_prev, w_prev, Sgw, Sww, h: float32 (n,) state, **updated in place**
            (the previous arrival, the smoothed secant sums, the curvature).
        lam, rho, eps, h_max: the confidence and the smoothing constants.

    Returns:
        ``(F, c)``: float32 (n,) forecast and the correction it applied.

    Raises:
        ValueError: lengths differ or an array is not float32.
    """
    arrays = {"G": G, "w_now": w_now, "w_then": w_then, "G_prev": G_prev, "w_prev": w_prev,
              "Sgw": Sgw, "Sww": Sww, "h": h}
    for name, v in arrays.items():
        if v.dtype != np.float32 or v.size != G.size:
            raise ValueError(f"aesp_step: {name} must be float32 with {G.size} elements, "
                             f"got {v.dtype} with {v.size}")
    F, c = np.empty_like(G), np.empty_like(G)
    _aesp_step(G, w_now, w_then, G_prev, w_prev, Sgw, Sww, h, np.float32(lam), np.float32(rho),
               np.float32(eps), np.float32(h_max), F, c)
    return F, c


@njit(cache=True, nogil=True)
def _local_step(G, g_new, g_old, lam_new, lam_old, d):
    if lam_new == lam_old:                          # the same rounding as G + lambda (g_new - g_old)
        for i in range(G.size):
            d[i] = G[i] + lam_new * (g_new[i] - g_old[i])
    else:
        for i in range(G.size):
            d[i] = G[i] + (lam_new * g_new[i] - lam_old * g_old[i])


@njit(cache=True, fastmath=True, nogil=True)
def _local_step_sums(G, g_new, g_old, c_old, lam_new, lam_old, d):
    # fastmath lets the float64 sums be reassociated into SIMD lanes (5x faster,
    # measured); the elementwise results are the same as without it.
    q = cc = r = 0.0                                # float64 accumulators
    same = lam_new == lam_old
    for i in range(G.size):
        ci = g_new[i] - g_old[i]
        d[i] = G[i] + lam_new * ci if same else G[i] + (lam_new * g_new[i] - lam_old * g_old[i])
        gi, c64 = np.float64(G[i]), np.float64(ci)
        q += gi * c64
        cc += c64 * c64
        r += gi * np.float64(c_old[i])
        c_old[i] = ci
    return q, cc, r


def local_step(G, g_new, g_old, lam_new: float, lam_old: float, c_old=None):
    """The local-anchored direction ``d = G + lam_new g_new - lam_old g_old``
    in one pass (computed as ``G + lam (g_new - g_old)`` when both are ``lam``).

    Args:
        G: float32 (n,), the averaged gradient G_{t-k} that just arrived.
        g_new, g_old: float32 (n,), this rank's gradients g_t and g_{t-k}.
        lam_new, lam_old: the weights of g_t now and of g_{t-k} when it was
            added (1 and 1 for ``local``).
        c_old: None, or float32 (n,) the local change c_{t-k} of k steps ago,
            **overwritten in place** with c_t = g_new - g_old.

    Returns:
        ``d`` (float32 (n,), a new array) when ``c_old`` is None, else
        ``(d, q, cc, r)`` with the float64 sums ``q = <G, c_t>``,
        ``cc = <c_t, c_t>``, ``r = <G, c_{t-k}>`` (c_{t-k} as passed in).

    Raises:
        ValueError: lengths differ or an array is not float32.
    """
    arrays = {"G": G, "g_new": g_new, "g_old": g_old} | ({} if c_old is None else {"c_old": c_old})
    for name, v in arrays.items():
        if v.dtype != np.float32 or v.size != G.size:
            raise ValueError(f"local_step: {name} must be float32 with {G.size} elements, "
                             f"got {v.dtype} with {v.size}")
    d = np.empty_like(G)
    if c_old is None:
        _local_step(G, g_new, g_old, np.float32(lam_new), np.float32(lam_old), d)
        return d
    q, cc, r = _local_step_sums(G, g_new, g_old, c_old, np.float32(lam_new), np.float32(lam_old), d)
    return d, q, cc, r
