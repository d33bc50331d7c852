"""Gradient predictors for pseudo-synchronous SGD.

**Editing a rule?** AESP's steps 1-2 and the arrival scoring run as fused
Numba kernels by default; the readable NumPy code they are compiled from is
``kernels/reference.py`` (``aesp_step``, ``arrival_sums``). Run with
``MINIPS_REFERENCE_KERNELS=1`` (or ``train --reference-kernels``) and the
predictors call that readable code, so an edit there (or to
:meth:`AdaptivePredictor.forecast` / :meth:`AdaptivePredictor._update_confidence`,
which are plain Python either way) changes the run. See
:mod:`minips.kernels` ("The reference switch").

At step t the averaged gradient ``G_{t-k}`` computed at the old weights
``w_{t-k}`` arrives; the update needs a gradient at the current weights ``w_t``.
A predictor turns what arrived (and the history) into the update direction::

    d_t = predictor.predict(G_{t-k}, w_t, w_{t-k})

Predictors see only global quantities (averaged gradients, the replicated
weights), so every rank computes the same ``d_t`` and replicas stay
bit-identical. They are plain NumPy, so they also run in a one-process
simulation (:mod:`minips.distributed.staleness_lab`).

- :class:`LastPredictor` (``last``): ``d_t = G_{t-k}`` (naive pseudo-sync).
- :class:`EMAPredictor` (``ema``): exponential smoothing of the arrivals.
- :class:`HoltPredictor` (``holt``): Holt's linear (level + trend) smoothing,
  forecasting k steps ahead.
- :class:`LookaheadPredictor` (``lookahead``): weight prediction; the gradient
  is computed at extrapolated weights so it is fresh when applied (SpecTrain,
  Chen et al. 2018).
- :class:`AdaptivePredictor` (``adaptive``, AESP): first-order correction of the
  stale gradient with an exponentially smoothed secant curvature and an
  adaptive confidence ``lambda_t``. Our formulation of the seed paper's
  adaptive exponential-smoothing predictor (Wen et al., IJPP 2024); see
  docs/distributed.md.
- :class:`~.local_predictors.LocalPredictor` (``local``) and
  :class:`~.local_predictors.AdaptiveLocalPredictor` (``adaptive-local``): the
  arrived average plus this rank's own gradient change (module
  :mod:`.local_predictors`); ranks then hold slightly different weights.
"""
from __future__ import annotations

import numpy as np

from ...kernels import reference_kernels
from ...kernels import predict as kpredict
from ...kernels import reference as kreference
from .local_predictors import AdaptiveLocalPredictor, LocalPredictor
from .predictor_base import Predictor

__all__ = ["Predictor", "LastPredictor", "EMAPredictor", "HoltPredictor", "LookaheadPredictor",
           "AdaptivePredictor", "LocalPredictor", "AdaptiveLocalPredictor", "PREDICTORS", "make_predictor"]


class LastPredictor(Predictor):
    """``d_t = G_{t-k}``: apply the stale gradient as it is."""

    name = "last"

    def forecast(self, G, w_now, w_then):
        return G.copy()


class EMAPredictor(Predictor):
    """Simple exponential smoothing of the arrivals (Brown 1956):
    ``S_t = alpha * G_{t-k} + (1 - alpha) * S_{t-1}``, ``d_t = S_t``.

    Args:
        alpha: smoothing weight of the newest arrival, in (0, 1].
    """

    name = "ema"
    OPTIONS = ("alpha",)

    def __init__(self, staleness: int = 1, alpha: float = 0.5):
        super().__init__(staleness)
        if not 0 < alpha <= 1:
            raise ValueError(f"ema: alpha must be in (0, 1], got {alpha}")
        self.alpha = alpha
        self.S = None

    def forecast(self, G, w_now, w_then):
        if self.S is None:
            self.S = G.copy()
        else:
            self.S = self.alpha * G + (1 - self.alpha) * self.S
        return self.S.astype(np.float32, copy=True)

    def state_dict(self):
        return {**super().state_dict(), "S": self.S}

    def load_state_dict(self, state):
        super().load_state_dict(state)
        self.S = state.get("S")


class HoltPredictor(Predictor):
    """Holt's linear exponential smoothing (Holt 1957), forecasting k steps ahead::

        L_t = alpha * G_{t-k} + (1 - alpha) * (L_{t-1} + B_{t-1})     level
        B_t = beta * (L_t - L_{t-1}) + (1 - beta) * B_{t-1}            trend
        d_t = L_t + k * B_t

    Args:
        alpha, beta: smoothing weights in (0, 1].
    """

    name = "holt"
    OPTIONS = ("alpha", "beta")

    def __init__(self, staleness: int = 1, alpha: float = 0.5, beta: float = 0.1):
        super().__init__(staleness)
        for nm, v in (("alpha", alpha), ("beta", beta)):
            if not 0 < v <= 1:
                raise ValueError(f"holt: {nm} must be in (0, 1], got {v}")
        self.alpha, self.beta = alpha, beta
        self.L = self.B = None

    def forecast(self, G, w_now, w_then):
        if self.L is None:
            self.L, self.B = G.copy(), np.zeros_like(G)
        else:
            L_prev = self.L
            self.L = self.alpha * G + (1 - self.alpha) * (L_prev + self.B)
            self.B = self.beta * (self.L - L_prev) + (1 - self.beta) * self.B
        return (self.L + self.k * self.B).astype(np.float32)

    def state_dict(self):
        return {**super().state_dict(), "L": self.L, "B": self.B}

    def load_state_dict(self, state):
        super().load_state_dict(state)
        self.L, self.B = state.get("L"), state.get("B")


class LookaheadPredictor(Predictor):
    """Weight prediction (SpecTrain, Chen et al. 2018; as in pipeline-parallel
    training): compute step t's gradient at ``w_t - k * lr * mu * v_t``, where
    the heavy-ball velocity ``v_t`` would carry the weights in the k steps
    before the gradient is applied; then apply it unchanged (``d_t = G_{t-k}``).
    Without momentum it is the same as ``last``.
    """

    name = "lookahead"

    def forecast(self, G, w_now, w_then):
        return G.copy()

    def lookahead_weights(self, w, optimizer):
        v = optimizer.buffers[0] if optimizer.buffers else None
        if v is None or not optimizer.momentum:
            return None
        return w - np.float32(self.k * optimizer.lr * optimizer.momentum) * v


class AdaptivePredictor(Predictor):
    """Adaptive exponential-smoothing predicted gradient (AESP).

    To change the rule in class: steps 1-2 run in the fused Numba kernel
    :func:`minips.kernels.predict.aesp_step` unless ``MINIPS_REFERENCE_KERNELS=1``
    is set (or ``--reference-kernels`` given); with it, the readable twin
    :func:`minips.kernels.reference.aesp_step` runs, and editing it changes
    the trajectory. Step 3 (:meth:`_update_confidence`) is always Python.

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
        fused: steps 1-2 with the Numba kernel
            :func:`minips.kernels.predict.aesp_step` (default); False runs its
            plain-NumPy twin :func:`minips.kernels.reference.aesp_step` (same
            result to float32 rounding); ``MINIPS_REFERENCE_KERNELS=1`` forces
            the twin whatever this says.

    The defaults h_max = 10 and lambda0 = 0 come from the tuning sweep in
    docs/results.md (section 4.3): with the first spec's lambda0 = 1 and
    h_max = 50, the corrections made from the first few, noisy secants
    collapsed a ConvNet on full Fashion-MNIST.

    Diagnostics: ``lambda``, ``h_mean``, plus ``cos_forecast`` and ``rel_error``.
    This is our formulation of the seed paper's predictor (Wen et al., IJPP
    2024), whose exact formulas are not public; see docs/distributed.md.
    """

    name = "adaptive"
    OPTIONS = ("rho", "rho_l", "h_max", "lambda0", "eps", "adapt_lambda", "fused")

    def __init__(self, staleness: int = 1, rho: float = 0.9, rho_l: float = 0.99, h_max: float = 10.0,
                 lambda0: float = 0.0, eps: float = 1e-12, adapt_lambda: bool = True, fused: bool = True):
        super().__init__(staleness)
        for nm, v in (("rho", rho), ("rho_l", rho_l)):
            if not 0 <= v < 1:
                raise ValueError(f"adaptive: {nm} must be in [0, 1), got {v}")
        if not h_max > 0:  # also refuses NaN
            raise ValueError(f"adaptive: h_max must be > 0, got {h_max}")
        if not 0 < eps < 1e-3:  # it only guards a division; 0 divides by zero, a large eps biases h
            raise ValueError(f"adaptive: eps must be in (0, 1e-3), got {eps} (default 1e-12)")
        if not 0 <= lambda0 <= 1:
            raise ValueError(f"adaptive: lambda0 must be in [0, 1], got {lambda0}")
        self.rho, self.rho_l, self.h_max, self.eps = rho, rho_l, h_max, eps
        self.adapt_lambda, self.fused = adapt_lambda, fused
        self.lambda0 = self.lam = float(lambda0)
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
            step = kpredict.aesp_step if self.fused and not reference_kernels() else kreference.aesp_step
            F, c = step(G, w_now, w_then, self.G_prev, self.w_prev, self.Sgw, self.Sww, self.h,
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
        # Copies: aesp_step (either path) updates these arrays in place every step.
        arrays = {k: None if getattr(self, k) is None else getattr(self, k).copy() for k in self._ARRAYS}
        return {**super().state_dict(), "lam": self.lam, "num": self.num, "den": self.den, **arrays}

    def load_state_dict(self, state):
        super().load_state_dict(state)
        self.lam, self.num, self.den = float(state["lam"]), float(state["num"]), float(state["den"])
        for k in self._ARRAYS:
            v = state.get(k)
            setattr(self, k, None if v is None else np.array(v, dtype=np.float32))


PREDICTORS = {cls.name: cls for cls in (LastPredictor, EMAPredictor, HoltPredictor, LookaheadPredictor,
                                        AdaptivePredictor, LocalPredictor, AdaptiveLocalPredictor)}


def make_predictor(name: str, staleness: int = 1, **options) -> Predictor:
    """Build a predictor by name with its options.

    Raises:
        ValueError: unknown name (valid ones listed) or unknown option (valid
            options of that predictor listed).
    """
    import inspect
    if name not in PREDICTORS:
        raise ValueError(f"unknown predictor {name!r}; choose one of {', '.join(PREDICTORS)}")
    cls = PREDICTORS[name]
    accepted = set(inspect.signature(cls.__init__).parameters) - {"self", "staleness"}
    bad = sorted(set(options) - accepted)
    if bad:
        raise ValueError(f"predictor {name!r} has no option(s) {', '.join(bad)}; "
                         f"its options: {', '.join(sorted(accepted)) or 'none'}")
    return cls(staleness, **options)
