"""``layerwise-local``: ``adaptive-local`` with one confidence per parameter
tensor (a layer's weight, its bias), each chosen from the noise measured in
that tensor and pooled across ranks (issue 31).

Notation as in :mod:`.local_predictors`. ``adaptive-local`` shrinks the local
change ``c^i_t = g^i_t - g^i_{t-k}`` by one lambda, the pooled regression of
the global change ``a_t = G_t - G_{t-k}`` on it. Since the local changes
average to the global one, ``mean_i <a, c^i> = ||a||^2`` and
``mean_i <c^i, c^i> = ||a||^2 + mean_i ||c^i - a||^2``: lambda is the share of
signal in the local change, ``1 / (1 + noise/signal)``. One number for the
whole model lets the noisy majority of the weights set it for all of them. Here
each tensor l has its own::

    pipeline fill, t < k:   d^i_t = g^i_t                         (lambda_l = 1)
    t >= k:                 d^i_t[l] = G_{t-k}[l] + lambda_{l,t} g^i_t[l] - lambda_{l,t-k} g^i_{t-k}[l]
    when G_t arrives:       num_l = rho num_l + (1 - rho) mean_i <a_t, c^i_t>_l
                            den_l = rho den_l + (1 - rho) mean_i <c^i_t, c^i_t>_l
                            lambda_l = clip(num_l / den_l, 0, 1)   (1 until `warmup` samples)

(the telescoping form of ``adaptive-local``: each local gradient is taken back
with the weight it was added with, so ranks differ by their last k terms for
any sequence of lambdas). The ranks pool the 2L sums inside the gradient's
Iallreduce (2L floats appended to the buffer, L = the number of tensors), so
every rank uses the same lambdas; the sums lag by k + 1 steps, as in
``adaptive-local``.

Our formulation (the issue's "per-layer confidence"), not a transcription of
a paper. Why it might help: where a tensor's gradient changes fast against its
batch noise its lambda stays near 1 (the fresh local gradient, as ``local``),
where it is noise it falls towards 1/P (less drift between ranks). What it
cannot change: for lambda < 1 the averaged direction is part stale,
``G_{t-k} + lambda (G_t - G_{t-k})``, with the stability loss measured for
``adaptive-local`` (docs/accuracy.md, section 5.1).

The arithmetic is NumPy in :meth:`LayerwiseLocalPredictor.predict`
(segment sums by ``np.add.reduceat`` over the flat buffer's tensors).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from .local_predictors import LocalPredictor, post_ready_sums

__all__ = ["LayerwiseLocalPredictor"]


class LayerwiseLocalPredictor(LocalPredictor):
    """``layerwise-local``: a pooled, per-tensor confidence in the local change
    (see the module docstring for the rule).

    pseudo-sync hands the tensors' places in the flat buffer to
    :meth:`set_layout` before the first step; the payload is then 2L float32.
    Without a layout (the predictor driven on its own) the whole buffer is one
    tensor: ``adaptive-local``'s rule with ``lambda0 = 1``.

    Args:
        staleness: k >= 1.
        rho: smoothing of the regression sums, in [0, 1) (default 0.99).
        warmup: pooled samples before the lambdas follow the regression (default 10).

    Raises:
        ValueError: rho or warmup out of range.

    Diagnostics (every step): ``lambda`` (the mean of the lambdas weighted by
    the tensors' sizes), ``lambda_min``, ``lambda_max``.
    """

    name = "layerwise-local"
    payload_per_tensor = 2

    @dataclass
    class Options:
        rho: float = field(default=0.99, metadata={"help": "smoothing of each tensor's regression, in [0, 1)"})
        warmup: int = field(default=10, metadata={"help": "directions before lambda is learnt", "unit": "steps"})

        def validate(self):
            if not 0 <= self.rho < 1:
                raise ValueError(f"layerwise-local: rho must be in [0, 1), got {self.rho}")
            if self.warmup < 0:
                raise ValueError(f"layerwise-local: warmup must be >= 0, got {self.warmup}")

    def __init__(self, staleness: int = 1, **options):
        super().__init__(staleness, **options)
        self.rho, self.warmup = float(self.rho), int(self.warmup)
        self.starts = None               # int64 (L,): each tensor's first element in the flat buffer
        self.sizes = None                # int64 (L,)
        self.samples = 0
        self.j = 0                       # directions computed after the fill
        self.c = None                    # float32 (k, n): c^i_j at slot j mod k
        self.ready = None                # float64 (2L,): (<a, c>_l, <c, c>_l) to post next
        self.posted = deque()            # per buffer in flight: does its tail hold sums?

    def set_layout(self, bounds):
        """The tensors' (start, stop) in the flat buffer (contiguous, covering it)."""
        bounds = sorted(bounds)
        self.starts = np.array([a for a, _ in bounds], np.int64)
        self.sizes = np.array([b - a for a, b in bounds], np.int64)
        L = len(bounds)
        self.extra_floats = 2 * L
        self.lam_l = np.ones(L)                       # lambda_l now
        self.added_l = np.ones((self.k + 1, L))       # the lambdas each gradient in the ring was added with
        self.num, self.den = np.zeros(L), np.zeros(L)
        self.q, self.cc = np.zeros((self.k, L)), np.zeros((self.k, L))   # <G_{j-k}, c_j>_l, <c_j, c_j>_l

    def observe_local(self, g):
        if self.starts is None:   # no layout given (a predictor used outside pseudo-sync): one tensor, all of g
            self.set_layout([(0, g.size)])
        super().observe_local(g)

    def _per_element(self, lam):
        return np.repeat(lam.astype(np.float32), self.sizes)

    def _segments(self, x):
        return np.add.reduceat(x, self.starts)

    def fill(self):
        t = self.t - 1
        self.added_l[t % (self.k + 1)] = self.lam_l
        self._log()
        return self._per_element(self.lam_l) * self.ring[t % (self.k + 1)]

    def predict(self, G, w_now, w_then):
        t, m = self.t - 1, self.k + 1
        g_new, g_old = self.ring[t % m], self.ring[(t - self.k) % m]
        self.added_l[t % m] = self.lam_l
        lam_new, lam_old = self._per_element(self.lam_l), self._per_element(self.added_l[(t - self.k) % m])
        d = G + (lam_new * g_new - lam_old * g_old)          # the telescoping form, per tensor
        if self.c is None:
            self.c = np.zeros((self.k, G.size), np.float32)
        s = self.j % self.k                                  # slot of c_{t-k}; it receives c_t
        G64, c_old = G.astype(np.float64), self.c[s].astype(np.float64)
        c_new = g_new.astype(np.float64) - g_old
        r = self._segments(G64 * c_old)                      # <G_{t-k}, c_{t-k}>: a_{t-k} = G_{t-k} - G_{t-2k}
        if self.j >= self.k:
            self.ready = np.concatenate([r - self.q[s], self.cc[s]])
        self.q[s], self.cc[s] = self._segments(G64 * c_new), self._segments(c_new * c_new)
        self.c[s] = c_new
        self.j += 1
        self._log()
        return d

    def _log(self):
        self.diagnostics = {"lambda": float(self.lam_l @ self.sizes / self.sizes.sum()),
                            "lambda_min": float(self.lam_l.min()), "lambda_max": float(self.lam_l.max())}

    def payload(self):
        return post_ready_sums(self)

    def receive(self, pooled):
        if not self.posted.popleft():      # the same on every rank: the steps decide, not the data
            return
        L = len(self.starts)
        self.num = self.rho * self.num + (1 - self.rho) * pooled[:L].astype(np.float64)
        self.den = self.rho * self.den + (1 - self.rho) * pooled[L:].astype(np.float64)
        self.samples += 1
        if self.samples >= self.warmup:
            ok = self.den > 0
            self.lam_l[ok] = np.clip(self.num[ok] / self.den[ok], 0.0, 1.0)

    def state_dict(self):
        return {**super().state_dict(), "lam_l": self.lam_l.copy(), "added_l": self.added_l.copy(),
                "num": self.num.copy(), "den": self.den.copy(), "samples": self.samples, "j": self.j,
                "c": None if self.c is None else self.c.copy(), "q": self.q.copy(), "cc": self.cc.copy(),
                "ready": None if self.ready is None else self.ready.copy(), "posted": list(self.posted)}

    def load_state_dict(self, state):
        super().load_state_dict(state)
        for key in ("lam_l", "added_l", "num", "den", "q", "cc"):
            setattr(self, key, np.array(state[key], np.float64))
        self.samples, self.j = int(state["samples"]), int(state["j"])
        self.c = None if state["c"] is None else np.array(state["c"], np.float32)
        self.ready = None if state["ready"] is None else np.array(state["ready"], np.float64)
        self.posted = deque(bool(x) for x in state["posted"])
