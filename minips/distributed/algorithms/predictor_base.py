"""The base class of the gradient predictors of pseudo-synchronous SGD (its
interface: :meth:`Predictor.predict`; the rules: :mod:`.predictors`,
:mod:`.aesp` and :mod:`.local_predictors`, all registered in
:data:`.predictors.PREDICTORS`).

Every rule's arithmetic lives in its own file, once, and that code is what
runs: edit it and the next run follows the edit. Where NumPy would make a dozen
passes over the n weights, the file writes the rule as a plain element loop
compiled by Numba (``@njit``, the loop reads like the formula; set
``NUMBA_DISABLE_JIT=1`` to step through it in a debugger). The scoring of
forecasts (:func:`arrival_sums`) is such a pair of loops, here.
"""
from __future__ import annotations

import inspect
import os
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numba import njit

from ...options import fields_of

__all__ = ["Predictor", "arrival_sums"]


@njit(cache=True, nogil=True)
def _forecast_sums(G, G_naive, F):
    fg = ff = gg = err = naive = 0.0                      # float64 accumulators
    for i in range(G.size):
        g, f, gn = np.float64(G[i]), np.float64(F[i]), np.float64(G_naive[i])
        fg += f * g
        ff += f * f
        gg += g * g
        err += (f - g) * (f - g)                          # what the forecast missed
        naive += (gn - g) * (gn - g)                      # what the naive stale gradient missed
    return fg, ff, gg, err, naive


@njit(cache=True, nogil=True)
def _forecast_sums_with_correction(G, G_naive, F, c):
    fg = ff = gg = err = naive = ac = cc = 0.0
    for i in range(G.size):
        g, f, gn, ci = np.float64(G[i]), np.float64(F[i]), np.float64(G_naive[i]), np.float64(c[i])
        fg += f * g
        ff += f * f
        gg += g * g
        err += (f - g) * (f - g)
        naive += (gn - g) * (gn - g)
        ac += (g - gn) * ci                               # <change the naive forecast missed, correction>
        cc += ci * ci
    return fg, ff, gg, err, naive, ac, cc


def arrival_sums(G: np.ndarray, G_naive: np.ndarray, F: np.ndarray, c: np.ndarray | None = None) -> dict:
    """Inner products that score the forecast F made for step j once G_j arrived.

    Args:
        G: float32 (n,), the gradient G_j that arrived.
        G_naive: float32 (n,), G_{j-k}, what the naive forecast used.
        F: float32 (n,), the forecast applied at step j.
        c: float32 (n,), the correction applied at step j (AESP), or None.

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
        fg, ff, gg, err, naive = _forecast_sums(G, G_naive, F)
        return {"FG": fg, "FF": ff, "GG": gg, "err": err, "naive_err": naive}
    fg, ff, gg, err, naive, ac, cc = _forecast_sums_with_correction(G, G_naive, F, c.reshape(-1))
    return {"FG": fg, "FF": ff, "GG": gg, "err": err, "naive_err": naive, "ac": ac, "cc": cc}


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

    #: how the rule's arithmetic is written: "NumPy" or "Numba loop" (the banner
    #: and summary.json say it, with the file: :meth:`code`)
    CODE = "NumPy"

    #: the correction term of the latest forecast (AESP sets it; others leave
    #: None); kept with the forecast to score it when its gradient arrives.
    last_correction = None

    @dataclass
    class Options:
        """No options. A rule with options declares its own ``Options``
        dataclass (as the algorithms do, :mod:`minips.options`): one field per
        option with its default and ``metadata={"help": ...}``, and a
        ``validate()`` raising ValueError; the constructor takes them as
        keywords and sets each as an attribute of the same name."""

    #: True when the direction uses this rank's own fresh gradient (``local``,
    #: ``adaptive-local``): ranks then apply different updates, pseudo-sync
    #: stops keeping replicas, and it calls :meth:`observe_local` and :meth:`fill`.
    uses_local_gradient = False
    #: why this rule cannot run with ``--clip-norm`` (pseudo-sync refuses the pair in one line
    #: when it is built), or None: it can
    clip_norm_refused: str | None = None
    #: floats this predictor appends to every Iallreduce buffer (averaged over
    #: ranks with the gradient): :meth:`payload` fills them, :meth:`receive` reads them.
    extra_floats = 0
    #: floats per parameter tensor appended on top of ``extra_floats`` (a rule
    #: with one number per tensor, ``layerwise-local``: :meth:`set_layout`
    #: then sets the instance's ``extra_floats`` to the total)
    payload_per_tensor = 0

    def code(self) -> str:
        """Where the rule that runs is written, e.g.
        ``minips/distributed/algorithms/local_predictors.py::LocalPredictor (NumPy)``:
        the file to edit (the path from the package's parent), the class and how
        its arithmetic runs (a Numba loop runs as Python under ``NUMBA_DISABLE_JIT=1``)."""
        import minips
        f = Path(inspect.getsourcefile(type(self))).resolve()
        try:
            rel = f.relative_to(Path(minips.__file__).resolve().parent.parent).as_posix()
        except ValueError:  # a predictor defined outside the package (a notebook's, a test's)
            rel = f.name
        how = self.CODE
        if how != "NumPy" and os.environ.get("NUMBA_DISABLE_JIT", "0") not in ("", "0"):
            how += ", as Python: NUMBA_DISABLE_JIT"
        return f"{rel}::{type(self).__name__} ({how})"

    def options(self) -> dict:
        """The predictor's options as constructed (defaults included), e.g.
        ``{"rho": 0.9, ...}``; the Trainer writes them to summary.json so a run
        says exactly which predictor it used."""
        return {"staleness": self.k, **{n: getattr(self, n) for n in fields_of(self.Options)}}

    def __init__(self, staleness: int = 1, **options):
        if staleness < 1:
            raise ValueError(f"staleness must be >= 1, got {staleness}")
        opts = self.Options(**options)  # an unknown keyword: TypeError, as for any function
        if hasattr(opts, "validate"):
            opts.validate()
        for n in fields_of(self.Options):
            setattr(self, n, getattr(opts, n))
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
        pass over the vectors: :func:`arrival_sums`)."""
        self.diagnostics = {}
        if len(self._pending) < self.k:
            return
        F, G_naive, c = self._pending.popleft()
        s = arrival_sums(G, G_naive, F, c)
        self.diagnostics["cos_forecast"] = s["FG"] / np.sqrt(s["FF"] * s["GG"]) if s["FF"] * s["GG"] > 0 else 0.0
        self.diagnostics["rel_error"] = float(np.sqrt(s["err"] / s["naive_err"])) if s["naive_err"] > 0 else 1.0
        self.on_arrival(s)

    def on_arrival(self, sums: dict) -> None:
        """Hook: the true gradient G_j of the oldest pending forecast arrived;
        ``sums`` holds the inner products of :func:`arrival_sums`."""

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

    def set_layout(self, bounds: list) -> None:
        """The parameter tensors' ``(start, stop)`` in the flat buffer, given
        once before the first step (for rules with one number per tensor)."""

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
