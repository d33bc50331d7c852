"""The base class of the gradient predictors of pseudo-synchronous SGD (its
interface: :meth:`Predictor.predict`; the rules: :mod:`.predictors` and
:mod:`.local_predictors`, both registered in :data:`.predictors.PREDICTORS`).
"""
from __future__ import annotations

from collections import deque

import numpy as np

from ...kernels import impl
from ...kernels import predict as kpredict

__all__ = ["Predictor"]


class Predictor:
    """Base class. Subclasses implement :meth:`forecast`; the base class keeps
    the diagnostics common to all (forecast vs. arrived gradient).

    Args:
        staleness: k >= 1, the number of steps between computing a gradient
            and applying it.

    Attributes:
        diagnostics: dict logged every step by the Trainer:
            ``cos_forecast`` (cosine between the forecast made for step j and
            the gradient G_j that later arrived), ``rel_error`` (``||F_j - G_j||
            / ||G_{j-k} - G_j||``: < 1 means better than the naive stale
            gradient), plus predictor-specific entries.
    """

    name = "base"

    #: the correction term of the latest forecast (AESP sets it; others leave
    #: None); kept with the forecast to score it when its gradient arrives.
    last_correction = None

    #: names of the constructor's options, recorded by :meth:`options`
    OPTIONS: tuple = ()

    #: True when the direction uses this rank's own fresh gradient (``local``,
    #: ``adaptive-local``): ranks then apply different updates, pseudo-sync
    #: stops keeping replicas, and it calls :meth:`observe_local` and :meth:`fill`.
    uses_local_gradient = False
    #: floats this predictor appends to every Iallreduce buffer (averaged over
    #: ranks with the gradient): :meth:`payload` fills them, :meth:`receive` reads them.
    extra_floats = 0

    def options(self) -> dict:
        """The predictor's options as constructed (defaults included), e.g.
        ``{"rho": 0.9, ...}``; the Trainer writes them to summary.json so a run
        says exactly which predictor it used."""
        return {"staleness": self.k, **{n: getattr(self, n) for n in self.OPTIONS}}

    def __init__(self, staleness: int = 1):
        if staleness < 1:
            raise ValueError(f"staleness must be >= 1, got {staleness}")
        self.k = staleness
        self.diagnostics: dict = {}
        # forecasts waiting for their true gradient, oldest first:
        # (F_j, G_{j-k}, correction_j or None) for j = t-k+1..t
        self._pending: deque = deque()

    def predict(self, G: np.ndarray, w_now: np.ndarray, w_then: np.ndarray) -> np.ndarray:
        """Direction for this step from the arrival ``G`` = G_{t-k}.

        Args:
            G: float32 (n,) averaged gradient computed at ``w_then``.
            w_now: float32 (n,) current weights w_t.
            w_then: float32 (n,) weights w_{t-k} at which ``G`` was computed.

        Returns:
            float32 (n,) update direction d_t (a new array; G is not modified).
        """
        self._score_arrival(G)
        d = self.forecast(G, w_now, w_then)
        self._pending.append((d.copy(), G.copy(), self.last_correction))
        return d

    def _score_arrival(self, G):
        """G_j just arrived: compare it with the forecast made for step j (one
        fused pass over the vectors: :func:`minips.kernels.predict.arrival_sums`)."""
        self.diagnostics = {}
        if len(self._pending) < self.k:
            return
        F, G_naive, c = self._pending.popleft()
        s = impl(kpredict).arrival_sums(G, G_naive, F, c)
        self.diagnostics["cos_forecast"] = s["FG"] / np.sqrt(s["FF"] * s["GG"]) if s["FF"] * s["GG"] > 0 else 0.0
        self.diagnostics["rel_error"] = float(np.sqrt(s["err"] / s["naive_err"])) if s["naive_err"] > 0 else 1.0
        self.on_arrival(s)

    def on_arrival(self, sums: dict) -> None:
        """Hook: the true gradient G_j of the oldest pending forecast arrived;
        ``sums`` holds the inner products of :func:`minips.kernels.predict.arrival_sums`."""

    def forecast(self, G, w_now, w_then) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    # --- hooks of predictors that use the local gradient (local_predictors.py) -
    def observe_local(self, g: np.ndarray) -> None:
        """This rank's fresh gradient g_t (float32 (n,), read-only: copy what you
        keep), called before it goes into the allreduce."""

    def fill(self) -> np.ndarray | None:
        """The direction of a pipeline-fill step (t < k, nothing arrived yet);
        None: no update (the replicated predictors)."""
        return None

    def payload(self) -> np.ndarray | None:
        """float32 (extra_floats,) to append to the buffer posted now."""
        return None

    def receive(self, pooled: np.ndarray) -> None:
        """The rank-average of the payload posted with the gradient that just arrived."""

    def lookahead_weights(self, w: np.ndarray, optimizer) -> np.ndarray | None:
        """Weights at which to compute this step's gradient (None = at ``w``)."""
        return None

    # --- checkpoint state -----------------------------------------------------
    def state_dict(self) -> dict:
        """Arrays and scalars to save; restored by :meth:`load_state_dict`."""
        return {"pending_F": [f for f, _, _ in self._pending], "pending_G": [g for _, g, _ in self._pending],
                "pending_c": [c for _, _, c in self._pending]}

    def load_state_dict(self, state: dict) -> None:
        F, G = state.get("pending_F", []), state.get("pending_G", [])
        c = state.get("pending_c", [None] * len(F))
        self._pending = deque((np.asarray(f, np.float32), np.asarray(g, np.float32),
                               None if x is None else np.asarray(x, np.float32)) for f, g, x in zip(F, G, c))
