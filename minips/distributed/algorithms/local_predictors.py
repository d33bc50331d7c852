"""Local-anchored predictors for pseudo-synchronous SGD: the averaged gradient
that just arrived, corrected by how this rank's *own* gradient changed since.

Notation as in :mod:`.pseudo_sync`: step t, staleness k, ``G_s`` the gradient
averaged over the P ranks at step s (it arrives at step s + k), ``g^i_t`` rank
i's fresh local gradient. The replicated predictors (:mod:`.predictors`) can
only forecast G_t from old averages; a rank does hold one fresh piece of step
t's gradient, its own ``g^i_t``. Both rules here use it::

    local:           d^i_t = G_{t-k} +        (g^i_t - g^i_{t-k})
    adaptive-local:  d^i_t = G_{t-k} + lambda_t (g^i_t - g^i_{t-k})

This is our formulation of the family of OD-SGD (Xu et al., 2020), DaSGD
(Zhou et al., 2020) and CD-SGD (Shi et al., 2021), which combine a delayed
global update with a fresh local one; it is not a transcription of any of
them. Why it works:

- **Telescoping.** Summed over steps 0..T (with the fill rule below), the
  directions a rank applied are ``sum_{s <= T-k} G_s + sum_{t = T-k+1..T} g^i_t``:
  every averaged gradient once, plus this rank's last k local gradients. Ranks
  differ only by those k terms (through momentum, a bounded drift of about
  ``lr k / (1 - mu)`` times a local-minus-average gradient), never by an
  accumulating error. The Trainer logs this drift as the consensus distance
  and evaluates the weights averaged over ranks.
- **Stability.** On ``f(w) = h w^2 / 2`` with every rank on the same data the
  rule *is* synchronous SGD (``g^i = G``), so it keeps sync's largest stable
  step (1.357 for Nesterov 0.9) where the naive stale update has 0.253 (k = 1)
  and 0.081 (k = 2): the delayed gradient destabilises momentum, the fresh
  local gradient does not. That holds for the ranks' *mean*. With per-rank
  gradient noise the ranks differ, and a rank's difference from the mean,
  ``e^i``, follows a rule of its own, direction ``h (e^i_t - e^i_{t-k})`` plus
  noise: its largest stable step is ``(1 + mu) / (1 + 2 mu)`` = 0.679 for
  k = 1 (half of sync's; 0.593 for k = 2). On P ranks with per-rank batches
  of 16 the staleness lab measures less still, about 0.37 of sync's largest
  stable learning rate from P = 16 on, where sync's own rises with P (its noise
  is the average's), while ``local``'s stays that of one rank's batch
  (:func:`minips.labs.staleness.ranks_table`). This is how ``local`` diverges
  at 32 ranks where sync trains: one rank's own loop runs away first, and the
  average carries it to the others a step later (docs/accuracy.md, section 10).
- **Fill rule.** In steps t < k nothing has arrived; apply the fresh local
  gradient ``d^i_t = g^i_t``, so that every local gradient later subtracted
  was first added. Without it the first steps' local noise stays as a
  permanent offset between ranks.

``adaptive-local`` learns how much of a local change to trust, by regressing
the observed global change on the local one (:meth:`AdaptiveLocalPredictor.receive`).
The ranks pool their regression sums inside the gradient's own Iallreduce (two
floats appended to the buffer: no extra message), so every rank uses the same
lambda.

``local`` is pseudo-sync's default predictor (why: docs/accuracy.md).

The code that runs is the code below: ``local``'s direction is one NumPy line
in :meth:`LocalPredictor.predict`; ``adaptive-local`` computes its direction
and its regression sums in one Numba element loop, :func:`_adaptive_local_loop`.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from numba import njit

from .predictor_base import Predictor

__all__ = ["LocalPredictor", "AdaptiveLocalPredictor"]


class LocalPredictor(Predictor):
    """``local``: fresh local gradient plus delayed global correction (our
    formulation of the OD-SGD / DaSGD / CD-SGD family; see the module docstring)::

        pipeline fill, t < k:   d^i_t = g^i_t
        t >= k:                 d^i_t = G_{t-k} + (g^i_t - g^i_{t-k})

    With ``sync_warmup = W > 0`` (issue 31) the first W steps are synchronous:
    pseudo-sync waits for the average of g_t and applies ``d_t = G_t`` (the
    ranks stay identical), and the rule above starts at step W with its fill
    (``d_W = g^i_W``, then ``G_W + (g^i_{W+1} - g^i_W)``, ...), so every
    average is still applied once. Why: early in training, while gradients
    are large, the ranks' drift changes the averaged gradient by more than
    sync's own batch noise (docs/accuracy.md, section 8); a synchronous start
    removes that phase, at the price of W steps whose allreduce is not
    hidden. The same idea as post-local SGD's synchronous warm-up (Lin,
    Stich, Patel & Jaggi, ICLR 2020), applied here to pseudo-sync.

    With ``correction_weight = lambda < 1`` (issue 43) the local correction is scaled:
    ``d^i_t = G_{t-k} + lambda (g^i_t - g^i_{t-k})`` (fill: ``lambda g^i_t``),
    ``adaptive-local`` with its confidence held at lambda. Why: a rank's
    difference from the ranks' mean then steps lambda times as far, so its
    largest stable step grows by 1 / lambda, while the mean's direction
    becomes ``lambda G_t + (1 - lambda) G_{t-k}``, part stale
    (docs/accuracy.md section 11; our analysis, no paper's rule).

    State: the last k + 1 local gradients (a ring of float32 (k+1, n); slot
    ``t mod (k+1)`` holds g^i_t). Ranks hold different weights (pseudo-sync
    reports ``replicated = False``).

    Args:
        staleness: k >= 1.
        sync_warmup: W >= 0 synchronous steps first (default 0: none).
        correction_weight: lambda in (0, 1] (default 1: ``local``).

    Raises:
        ValueError: sync_warmup < 0, or correction_weight outside (0, 1].
    """

    name = "local"
    uses_local_gradient = True

    #: subtract g_{t-k} with the weight it was added with (adaptive-local's option)
    telescope = True
    #: synchronous steps first (local's option; 0 for the rules built on local that lack it)
    sync_warmup = 0
    #: the correction weight (local's option; 1 for the rules built on local that lack it)
    correction_weight = 1.0

    @dataclass
    class Options:
        sync_warmup: int = field(default=0, metadata={"help": "synchronous steps first (0 = none)",
                                                      "unit": "steps"})
        correction_weight: float = field(default=1.0, metadata={
            "help": "the correction weight lambda in (0, 1]: d = G_{t-k} + lambda (g_t - g_{t-k})"})

        def validate(self):
            if self.sync_warmup < 0:
                raise ValueError(f"local: sync_warmup must be >= 0 (synchronous steps first; 0 = none), "
                                 f"got {self.sync_warmup}")
            if not 0 < self.correction_weight <= 1:
                raise ValueError(f"local: correction_weight must be in (0, 1] (1 = local), "
                                 f"got {self.correction_weight}")

    def __init__(self, staleness: int = 1, **options):
        super().__init__(staleness, **options)
        self.sync_warmup = int(self.sync_warmup)
        self.lam = float(self.correction_weight)
        self.t = 0          # local gradients observed (the next one is g_t)
        self.ring = None    # float32 (k+1, n): g^i_{t-k} .. g^i_t
        self.added = np.ones(self.k + 1)  # the weight each g in the ring was added with

    def observe_local(self, g):
        if self.ring is None:
            self.ring = np.zeros((self.k + 1, g.size), np.float32)
        self.ring[self.t % (self.k + 1)] = g   # overwrites g_{t-k-1}, no longer needed
        self.t += 1

    def _new_and_old(self):
        """(g^i_t, g^i_{t-k}, weight of g_t now, weight of g_{t-k}) for the step
        whose gradient was observed last; records g_t's weight."""
        t, m = self.t - 1, self.k + 1
        self.added[t % m] = self.lam
        old = self.added[(t - self.k) % m] if self.telescope else self.lam
        return self.ring[t % m], self.ring[(t - self.k) % m], self.lam, old

    def fill(self):
        g_new, _, lam, _ = self._new_and_old()
        self.diagnostics = {"lambda": lam} if self.extra_floats else {}
        return (np.float32(lam) * g_new).astype(np.float32)  # d = g_t: added now, subtracted k steps later

    def predict(self, G, w_now, w_then):
        g_new, g_old, lam, _ = self._new_and_old()
        self.diagnostics = {}
        if lam == 1.0:
            return G + (g_new - g_old)  # d = G_{t-k} + (g_t - g_{t-k}): the arrived average, corrected locally
        return G + np.float32(lam) * (g_new - g_old)  # the correction scaled (option correction_weight)

    def state_dict(self):
        return {**super().state_dict(), "t": self.t, "ring": None if self.ring is None else self.ring.copy(),
                "added": self.added.copy()}

    def load_state_dict(self, state):
        super().load_state_dict(state)
        self.t = int(state["t"])
        self.ring = None if state["ring"] is None else np.array(state["ring"], np.float32)
        self.added = np.array(state["added"], np.float64)


def post_ready_sums(predictor) -> np.ndarray:
    """The float32 ``(extra_floats,)`` tail a regression-based local predictor
    appends to the gradient it allreduces: its sums waiting in ``ready`` (then
    cleared), or zeros when none are waiting. ``posted`` records which, per
    buffer in flight, so that ``receive`` knows, on every rank alike, whether
    the pooled tail holds sums."""
    out = np.zeros(predictor.extra_floats, np.float32)
    predictor.posted.append(predictor.ready is not None)
    if predictor.ready is not None:
        out[:] = predictor.ready
        predictor.ready = None
    return out


class AdaptiveLocalPredictor(LocalPredictor):
    """``adaptive-local``: ``local`` with an adaptive confidence in the local
    change (our formulation; it reads as the seed paper describes its method,
    exponential smoothing that adapts the confidence placed in the history)::

        pipeline fill, t < k:   d^i_t = lambda_t g^i_t            (lambda_t = lambda_0)
        t >= k:                 c^i_t = g^i_t - g^i_{t-k}
                                d^i_t = G_{t-k} + lambda_t c^i_t             (telescope=False)
                                d^i_t = G_{t-k} + lambda_t g^i_t - lambda_{t-k} g^i_{t-k}
                                                                             (telescope=True, default)
        when G_t arrives (step t + k), the global change a_t = G_t - G_{t-k}
        is regressed on the local change c^i_t, pooled over ranks:
                                num = rho num + (1 - rho) mean_i <a_t, c^i_t>
                                den = rho den + (1 - rho) mean_i <c^i_t, c^i_t>
                                lambda = clip(num / den, 0, 1)     (lambda_0 until
                                                                    `warmup` samples)

    Why this lambda: the local changes average to the global one
    (``mean_i c^i_t = a_t``), so the pooled least-squares slope is the best
    weight for forecasting ``a_t`` from ``c^i_t``: about 1 when the gradient
    changes fast compared with its batch noise, about 1/P when the local
    changes are pure noise (then ``<a, c^i>`` holds only the 1/P of the noise
    that is rank i's own).

    Pooling without a message: at step t + k a rank computes its sums
    ``<a_t, c^i_t> = <G_t, c^i_t> - <G_{t-k}, c^i_t>`` (the second term was
    computed at step t, when c^i_t was formed) and ``<c^i_t, c^i_t>``, and
    appends them to the gradient buffer it posts next (two floats,
    :attr:`extra_floats`); the allreduce averages them with the gradient. The
    regression thus lags by k + 1 steps, the same on every rank, so every rank
    uses the same lambda. With a varying lambda the corrections no longer
    telescope exactly (the residual is ``sum_t n^i_t (lambda_t - lambda_{t+k})``,
    n the local-minus-average gradient, and it accumulates as a random walk).
    The default ``telescope=True`` removes it: each local gradient is
    subtracted k steps later with the weight it was added with, so the sum of
    the directions is ``sum_s G_s + sum_{last k} lambda_t g^i_t`` for any
    sequence of lambdas, and ranks again differ only by their last k terms.
    (Measured on the MLP, P = 2, k = 2, 60 steps: the issue's form ended at a
    consensus distance of 0.53, mostly from lambda's first move from 1 to
    about 1/P, which leaves that step's noise as a permanent offset.) With a
    constant lambda the two forms are the same rule.

    Args:
        staleness: k >= 1.
        rho: smoothing of the regression sums, in [0, 1) (default 0.99).
        lambda0: the confidence until ``warmup`` pooled samples arrived, in
            [0, 1] (default 1: the ``local`` rule).
        warmup: pooled samples before lambda follows the regression (default 10).
        telescope: subtract g^i_{t-k} with the weight it was added with
            (default True), or with today's lambda (False: the issue's form).

    Diagnostics (every step): ``lambda``.
    """

    name = "adaptive-local"
    CODE = "Numba loop"
    extra_floats = 2

    @dataclass
    class Options:
        rho: float = field(default=0.99, metadata={"help": "smoothing of the pooled regression, in [0, 1)"})
        lambda0: float = field(default=1.0, metadata={"help": "lambda during the warm-up, in [0, 1]"})
        warmup: int = field(default=10, metadata={"help": "directions before lambda is learnt", "unit": "steps"})
        telescope: bool = field(default=True, metadata={
            "help": "subtract g_{t-k} with the weight it was added with (false: with today's lambda)"})

        def validate(self):
            if not 0 <= self.rho < 1:
                raise ValueError(f"adaptive-local: rho must be in [0, 1), got {self.rho}")
            if not 0 <= self.lambda0 <= 1:
                raise ValueError(f"adaptive-local: lambda0 must be in [0, 1], got {self.lambda0}")
            if self.warmup < 0:
                raise ValueError(f"adaptive-local: warmup must be >= 0, got {self.warmup}")

    def __init__(self, staleness: int = 1, **options):
        super().__init__(staleness, **options)
        self.telescope = bool(self.telescope)
        self.lambda0, self.warmup = float(self.lambda0), int(self.warmup)
        self.lam = float(self.lambda0)
        self.num = self.den = 0.0
        self.samples = 0                 # pooled regression samples folded in
        self.j = 0                       # directions computed after the fill
        self.c = None                    # float32 (k, n): c^i_j at slot j mod k
        self.q = np.zeros(self.k)        # <G_{j-k}, c_j> per slot (computed when c_j was formed)
        self.cc = np.zeros(self.k)       # <c_j, c_j> per slot
        self.ready = None                # (<a, c>, <c, c>) to post next
        self.posted = deque()            # per buffer in flight: does its tail hold sums?

    def predict(self, G, w_now, w_then):
        g_new, g_old, lam_new, lam_old = self._new_and_old()
        if self.c is None:
            self.c = np.zeros((self.k, G.size), np.float32)
        s = self.j % self.k              # slot of c_{t-k}; it receives c_t
        d = np.empty_like(G)             # one pass: d, c_t (into slot s), and the regression sums
        q, cc, r = _adaptive_local_loop(G, g_new, g_old, self.c[s], np.float32(lam_new), np.float32(lam_old), d)
        if self.j >= self.k:             # c_{t-k} existed: its global change a = G_{t-k} - G_{t-2k} is known
            self.ready = (r - self.q[s], self.cc[s])
        self.q[s], self.cc[s] = q, cc
        self.j += 1
        self.diagnostics = {"lambda": self.lam}
        return d

    def payload(self):
        return post_ready_sums(self)

    def receive(self, pooled):
        if self.posted.popleft():        # the same on every rank: the steps decide, not the data
            self._update_confidence(float(pooled[0]), float(pooled[1]))

    def _update_confidence(self, ac, cc):
        """Fold one pooled sample into the smoothed regression of a on c."""
        self.num = self.rho * self.num + (1 - self.rho) * ac
        self.den = self.rho * self.den + (1 - self.rho) * cc
        self.samples += 1
        if self.samples >= self.warmup and self.den > 0:
            self.lam = float(np.clip(self.num / self.den, 0.0, 1.0))

    def state_dict(self):
        return {**super().state_dict(), "lam": self.lam, "num": self.num, "den": self.den,
                "samples": self.samples, "j": self.j, "c": None if self.c is None else self.c.copy(),
                "q": self.q.copy(), "cc": self.cc.copy(), "ready": self.ready, "posted": list(self.posted)}

    def load_state_dict(self, state):
        super().load_state_dict(state)
        self.lam, self.num, self.den = float(state["lam"]), float(state["num"]), float(state["den"])
        self.samples, self.j = int(state["samples"]), int(state["j"])
        self.c = None if state["c"] is None else np.array(state["c"], np.float32)
        self.q, self.cc = np.array(state["q"], np.float64), np.array(state["cc"], np.float64)
        self.ready = None if state["ready"] is None else tuple(float(x) for x in state["ready"])
        self.posted = deque(bool(x) for x in state["posted"])


@njit(cache=True, fastmath=True, nogil=True)
def _adaptive_local_loop(G, g_new, g_old, c_old, lam_new, lam_old, d):
    """``adaptive-local``'s direction and regression sums in one pass over the
    float32 (n,) vectors; ``c_old`` (c_{t-k} on entry) is overwritten with c_t::

        c = g_new - g_old                                 the local change g_t - g_{t-k}
        d = G + lam_new c            (lam_new == lam_old: the same rounding as G + lambda c)
        d = G + (lam_new g_new - lam_old g_old)           (otherwise: the telescoping form)
        q = <G, c_t>,  cc = <c_t, c_t>,  r = <G, c_{t-k}>  (float64)

    Returns (q, cc, r). ``fastmath`` lets the float64 sums be reassociated into
    SIMD lanes (5x faster, measured); the elementwise results are the same."""
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
