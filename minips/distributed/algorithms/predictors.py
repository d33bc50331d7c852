"""Gradient predictors for pseudo-synchronous SGD, and their table.

**Editing a rule?** Each rule is written once, in its own file, and that code
is what runs: the smoothing rules below (NumPy), AESP in :mod:`.aesp` (a
Numba element loop next to the class), the local-anchored rules in
:mod:`.local_predictors`, the delay compensations in
:mod:`.delay_compensation`. The run's banner and summary.json name the file
and class that ran (``predictor_code``).

At step t the averaged gradient ``G_{t-k}`` computed at the old weights
``w_{t-k}`` arrives; the update needs a gradient at the current weights ``w_t``.
A predictor turns what arrived (and the history) into the update direction::

    d_t = predictor.predict(G_{t-k}, w_t, w_{t-k})

The replicated predictors (``last``, ``ema``, ``holt``, ``lookahead``, AESP
and the delay compensations) see only global quantities (averaged gradients,
the replicated weights), so every rank computes the same ``d_t`` and replicas
stay bit-identical; the local-anchored ones also use the rank's own fresh
gradient, so ranks drift apart by a bounded amount. The rules of this file are
NumPy; AESP and ``local`` run their element loop in Numba next to their class
(one path: ``--reference-kernels`` does not change them). The replicated ones
also run in the one-process simulation :mod:`minips.labs.staleness`.

- :class:`LastPredictor` (``last``): ``d_t = G_{t-k}`` (naive pseudo-sync).
- :class:`EMAPredictor` (``ema``): exponential smoothing of the arrivals.
- :class:`HoltPredictor` (``holt``): Holt's linear (level + trend) smoothing,
  forecasting k steps ahead.
- :class:`LookaheadPredictor` (``lookahead``): weight prediction; the gradient
  is computed at extrapolated weights so it is fresh when applied (SpecTrain,
  Chen et al. 2018).
- :class:`~.aesp.AdaptivePredictor` (``adaptive``, AESP, module :mod:`.aesp`):
  first-order correction of the stale gradient with an exponentially smoothed
  secant curvature and an adaptive confidence ``lambda_t``. Our reconstruction
  of the seed paper's adaptive exponential-smoothing predictor (Wen et al.,
  IJPP 2024, which does not print its formulas); see docs/distributed.md.
- :class:`~.local_predictors.LocalPredictor` (``local``) and
  :class:`~.local_predictors.AdaptiveLocalPredictor` (``adaptive-local``): the
  arrived average plus this rank's own gradient change (module
  :mod:`.local_predictors`); ranks then hold slightly different weights.
- :class:`~.local_rewind.LocalRewindPredictor` (``local-rewind``, module
  :mod:`.local_rewind`): ``local`` whose swap of the rank's own old gradient
  for the average is made exactly in the momentum buffer and the weights
  (issue 31); :class:`~.local_layerwise.LayerwiseLocalPredictor`
  (``layerwise-local``, module :mod:`.local_layerwise`): ``adaptive-local``
  with one pooled confidence per parameter tensor (issue 31).
- :class:`~.local_pull.LocalPullPredictor` (``local-pull``, module :mod:`.local_pull`):
  ``local`` with each rank's weights pulled towards the ranks' mean of k steps
  ago, a mean every rank computes from the averaged gradients (issue 43).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...options import fields_of
from .aesp import AdaptivePredictor
from .delay_compensation import DCASGD, GapAware, SpikeCompensation
from .local_predictors import AdaptiveLocalPredictor, LocalPredictor
from .local_layerwise import LayerwiseLocalPredictor
from .local_pull import LocalPullPredictor
from .local_rewind import LocalRewindPredictor
from .predictor_base import Predictor

__all__ = ["Predictor", "LastPredictor", "EMAPredictor", "HoltPredictor", "LookaheadPredictor",
           "AdaptivePredictor", "LocalPredictor", "AdaptiveLocalPredictor", "LocalRewindPredictor",
           "LocalPullPredictor", "LayerwiseLocalPredictor", "PREDICTORS", "make_predictor"]


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

    @dataclass
    class Options:
        alpha: float = field(default=0.5, metadata={"help": "smoothing weight of the newest arrival, in (0, 1]"})

        def validate(self):
            if not 0 < self.alpha <= 1:
                raise ValueError(f"ema: alpha must be in (0, 1], got {self.alpha}")

    def __init__(self, staleness: int = 1, **options):
        super().__init__(staleness, **options)
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

    @dataclass
    class Options:
        alpha: float = field(default=0.5, metadata={"help": "smoothing weight of the level, in (0, 1]"})
        beta: float = field(default=0.1, metadata={"help": "smoothing weight of the trend, in (0, 1]"})

        def validate(self):
            for nm, v in (("alpha", self.alpha), ("beta", self.beta)):
                if not 0 < v <= 1:
                    raise ValueError(f"holt: {nm} must be in (0, 1], got {v}")

    def __init__(self, staleness: int = 1, **options):
        super().__init__(staleness, **options)
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


#: The table of predictors: name -> class, every rule pseudo-sync can use (its
#: ``predictor`` option). A new predictor is a class (subclass of Predictor) and a row here.
PREDICTORS = {cls.name: cls for cls in (LastPredictor, EMAPredictor, HoltPredictor, LookaheadPredictor,
                                        AdaptivePredictor, LocalPredictor, AdaptiveLocalPredictor,
                                        LocalRewindPredictor, LayerwiseLocalPredictor, LocalPullPredictor,
                                        SpikeCompensation, DCASGD, GapAware)}


def make_predictor(name: str, staleness: int = 1, **options) -> Predictor:
    """Build a predictor by name with its options (the fields of its ``Options``).

    Raises:
        ValueError: unknown name (valid ones listed) or unknown option (valid
            options of that predictor listed).
    """
    if name not in PREDICTORS:
        raise ValueError(f"unknown predictor {name!r}; choose one of {', '.join(PREDICTORS)}")
    cls = PREDICTORS[name]
    accepted = set(fields_of(cls.Options))
    bad = sorted(set(options) - accepted)
    if bad:
        raise ValueError(f"predictor {name!r} has no option(s) {', '.join(bad)}; "
                         f"its options: {', '.join(sorted(accepted)) or 'none'}")
    return cls(staleness, **options)
