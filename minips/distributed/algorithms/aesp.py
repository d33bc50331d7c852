"""AESP, the adaptive exponential-smoothing predicted gradient: the seed
paper's predictor for pseudo-synchronous SGD, as we reconstruct it.

Wen, Qiu, Zhang, Huang, Xiao & Lin, "Accelerating Massively Distributed Deep
Learning Through Efficient Pseudo-Synchronous Update Method", Int. J. Parallel
Programming (2024), describe a predictor that forecasts the current gradient
from the history of averaged gradients by exponential smoothing and adapts the
confidence it places in that history. The paper does not print its formulas;
the rule below is our reconstruction (docs/distributed.md, "AESP"). It is
selectable as ``pseudo-sync:adaptive``; the default predictor of pseudo-sync is
the local-anchored rule of :mod:`.local_predictors`, which measured more
accurate in every setting we ran (docs/accuracy.md).

The whole rule is in this file: :class:`AdaptivePredictor` (steps 1-3, in
Python around the loop) and :func:`aesp_step` / :func:`_aesp_loop` (steps 2
and 1 as one Numba element loop). Editing either changes the next run.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numba import njit

from .predictor_base import Predictor

__all__ = ["AdaptivePredictor", "aesp_step"]


class AdaptivePredictor(Predictor):
    """Adaptive exponential-smoothing predicted gradient (AESP).

    To change the rule in class: steps 1-2 are the loop :func:`aesp_step`
    right below this class (compiled by Numba; edit it and the next run uses
    the edit), step 3 is :meth:`_update_confidence` (Python).

    Forecast the gradient at the current weights from the stale one with a
    first-order (Taylor) correction, per coordinate::

        F_t = G_{t-k} + lambda_t * h * (w_t - w_{t-k})

    The curvature ``h`` is an exponential smoothing of secants of the gradient
    history; the confidence ``lambda_t`` in [0, 1] is a smoothed regression of
    how much of the gradient's change past corrections explained. The whole
    rule, steps 1-3 numbered as in the design spec and docs/distributed.md, is
    :meth:`forecast` with :meth:`_update_confidence` (step 3) right below it.

    Args:
        rho: smoothing of the curvature statistics (default 0.9).
        rho_l: smoothing of the confidence regression (default 0.99).
        h_max: upper clip of the curvature (default 10).
        lambda0: initial confidence (default 0: behave like ``last`` until the
            regression has evidence that the corrections help).
        eps: guards the division in h (default 1e-12).
        adapt_lambda: if False, lambda stays at lambda0 (an ablation).

    The defaults h_max = 10 and lambda0 = 0 come from the tuning sweep in
    docs/results.md (section 4.3): with the first spec's lambda0 = 1 and
    h_max = 50, the corrections made from the first few, noisy secants
    collapsed a ConvNet on full Fashion-MNIST.

    Diagnostics: ``lambda``, ``h_mean``, plus ``cos_forecast`` and ``rel_error``.
    This is our reconstruction of the seed paper's predictor (Wen et al.,
    IJPP 2024), whose exact formulas are not public; see docs/distributed.md.
    """

    name = "adaptive"
    CODE = "Numba loop"

    @dataclass
    class Options:
        rho: float = field(default=0.9, metadata={"help": "smoothing of the secant sums, in [0, 1)"})
        rho_l: float = field(default=0.99, metadata={"help": "smoothing of the confidence regression, in [0, 1)"})
        h_max: float = field(default=10.0, metadata={"help": "clip of the curvature estimate, > 0"})
        lambda0: float = field(default=0.0, metadata={"help": "starting confidence lambda, in [0, 1]"})
        eps: float = field(default=1e-12, metadata={"help": "guard of the curvature's division, in (0, 1e-3)"})
        adapt_lambda: bool = field(default=True, metadata={"help": "learn lambda (false: keep lambda0)"})

        def validate(self):
            for nm, v in (("rho", self.rho), ("rho_l", self.rho_l)):
                if not 0 <= v < 1:
                    raise ValueError(f"adaptive: {nm} must be in [0, 1), got {v}")
            if not self.h_max > 0:  # also refuses NaN
                raise ValueError(f"adaptive: h_max must be > 0, got {self.h_max}")
            if not 0 < self.eps < 1e-3:  # it only guards a division; 0 divides by zero, a large eps biases h
                raise ValueError(f"adaptive: eps must be in (0, 1e-3), got {self.eps} (default 1e-12)")
            if not 0 <= self.lambda0 <= 1:
                raise ValueError(f"adaptive: lambda0 must be in [0, 1], got {self.lambda0}")

    def __init__(self, staleness: int = 1, **options):
        super().__init__(staleness, **options)
        self.lambda0 = self.lam = float(self.lambda0)
        self.num = self.den = 0.0               # step 3's smoothed <a, c> and <c, c>
        self.Sgw = self.Sww = self.h = None     # step 1's smoothed secant sums and curvature
        self.G_prev = self.w_prev = None        # the previous arrival, for the secant

    def forecast(self, G, w_now, w_then):
        """AESP for the arrival ``G`` = G_{t-k}, computed at ``w_then`` = w_{t-k}::

            1. curvature, per coordinate, a secant between consecutive arrivals
               j' < j, exponentially smoothed:
                   dG = G_j - G_j',  dw = w_j - w_j'
                   Sgw = rho Sgw + (1-rho) dG dw,   Sww = rho Sww + (1-rho) dw dw
                   h = clip(Sgw / (Sww + eps), 0, h_max)
            2. forecast:  c_t = h (w_t - w_{t-k}),   F_t = G_{t-k} + lambda_t c_t
            3. confidence, when G_j arrives k steps after its forecast: regress
               a_j = G_j - G_{j-k} on c_j (:meth:`_update_confidence`).

        They run in the order 3, 2, 1: lambda_t already holds the evidence of
        this arrival, and c_t uses the curvature from *before* it.
        """
        # Step 3 for this arrival has run: Predictor.predict scored G against the forecast
        # made for its step and on_arrival() passed <a, c> and <c, c> to _update_confidence.
        if self.G_prev is None:
            # First arrival: no secant yet, so h = 0 and the forecast is the naive F = G.
            self.Sgw, self.Sww, self.h = np.zeros_like(G), np.zeros_like(G), np.zeros_like(G)
            self.G_prev, self.w_prev = G.copy(), w_then.copy()
            F, c = G.copy(), np.zeros_like(G)
        else:
            # Step 2 with the curvature from before G, then step 1 folds G into Sgw, Sww, h
            # (and G_prev, w_prev), in place, in one pass over the coordinates. Not the other
            # way round: an h that holds G's minibatch noise puts it into c_t, and
            # a_t = G_t - G_{t-k} holds it with the opposite sign, so step 3's <a, c> is biased
            # negative and lambda collapses (docs/distributed.md, "A correction to the spec").
            F, c = aesp_step(G, w_now, w_then, self.G_prev, self.w_prev, self.Sgw, self.Sww, self.h,
                             self.lam, self.rho, self.eps, self.h_max)
        self.last_correction = c  # predict() keeps c_t with F_t; step 3 scores it when G_t arrives
        self.diagnostics.update({"lambda": self.lam, "h_mean": float(self.h.mean())})
        return F

    def on_arrival(self, sums):
        # The arrival of G_j: sums["ac"] = <G_j - G_{j-k}, c_j>, sums["cc"] = <c_j, c_j>.
        self._update_confidence(sums["ac"], sums["cc"])

    def _update_confidence(self, ac, cc):
        """Step 3: exponentially smoothed least squares of a_j on c_j; the slope,
        clipped to [0, 1], is the confidence (1: corrections explain the change,
        0: they are noise, and AESP falls back to ``last``)."""
        self.num = self.rho_l * self.num + (1 - self.rho_l) * ac
        self.den = self.rho_l * self.den + (1 - self.rho_l) * cc
        if self.adapt_lambda and self.den > 0:
            self.lam = float(np.clip(self.num / self.den, 0.0, 1.0))

    _ARRAYS = ("Sgw", "Sww", "h", "G_prev", "w_prev")

    def state_dict(self):
        # Copies: aesp_step updates these arrays in place every step.
        arrays = {k: None if getattr(self, k) is None else getattr(self, k).copy() for k in self._ARRAYS}
        return {**super().state_dict(), "lam": self.lam, "num": self.num, "den": self.den, **arrays}

    def load_state_dict(self, state):
        super().load_state_dict(state)
        self.lam, self.num, self.den = float(state["lam"]), float(state["num"]), float(state["den"])
        for k in self._ARRAYS:
            v = state.get(k)
            setattr(self, k, None if v is None else np.array(v, dtype=np.float32))


@njit(cache=True, nogil=True)
def _aesp_loop(G, w_now, w_then, G_prev, w_prev, Sgw, Sww, h, lam, rho, eps, h_max, F, c):
    # All constants float32: an int or float64 constant here would promote the
    # arithmetic to float64 and make the loop 4x slower (measured).
    one_minus_rho = np.float32(1) - rho
    zero = np.float32(0)
    for i in range(G.size):
        ci = h[i] * (w_now[i] - w_then[i])      # step 2: correction, with h from before G
        c[i] = ci
        F[i] = G[i] + lam * ci                  #         forecast
        dG = G[i] - G_prev[i]                   # step 1: secant between consecutive arrivals
        dw = w_then[i] - w_prev[i]
        Sgw[i] = rho * Sgw[i] + one_minus_rho * dG * dw
        Sww[i] = rho * Sww[i] + one_minus_rho * dw * dw
        h[i] = min(max(Sgw[i] / (Sww[i] + eps), zero), h_max)
        G_prev[i] = G[i]
        w_prev[i] = w_then[i]


def aesp_step(G, w_now, w_then, G_prev, w_prev, Sgw, Sww, h, lam: float, rho: float, eps: float,
              h_max: float):
    """AESP's forecast (step 2) and then its curvature update (step 1) for one
    arrival, in one pass over the coordinates (:func:`_aesp_loop`)::

        c = h * (w_now - w_then)                    2. correction, with h from BEFORE G
        F = G + lambda * c                             forecast
        dG = G - G_prev;  dw = w_then - w_prev      1. secant between consecutive arrivals
        Sgw = rho Sgw + (1-rho) dG dw;  Sww = rho Sww + (1-rho) dw dw
        h = clip(Sgw / (Sww + eps), 0, h_max)
        G_prev = G;  w_prev = w_then

    Written as NumPy expressions this is about 25 passes over n floats with a
    temporary each (4.4 ms per step for the 422k-weight ConvNet, measured
    when the loop was introduced); as one loop it is one pass.

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
    _aesp_loop(G, w_now, w_then, G_prev, w_prev, Sgw, Sww, h, np.float32(lam), np.float32(rho),
               np.float32(eps), np.float32(h_max), F, c)
    return F, c
