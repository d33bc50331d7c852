"""``local-rewind``: the ``local`` rule, with each rank's own gradient taken back
out of its momentum buffer and weights once the average arrives (issue 31).

Notation as in :mod:`.local_predictors`. ``local`` applies
``d^i_t = G_{t-k} + (g^i_t - g^i_{t-k})``: the fresh local gradient now, and
k steps later the swap of g^i_{t-k} for the average G_{t-k}. Through momentum
the swap is not exact: g^i_{t-k} entered the buffer k steps ago and has
decayed to mu^k of itself, while the correction enters at full weight, so a
rank's buffer keeps ``-(1 - mu^k)`` times every old local-minus-average
gradient, decaying like mu^j (a tail of about 1/(1 - mu^2) = 5 steps of
noise at mu = 0.9), and its weights carry that tail's displacement. This is
part of what makes the ranks drift apart.

``local-rewind`` makes the swap exact. At step t (t >= k), when G_{t-k}
arrived, with ``delta = G_{t-k} - g^i_{t-k}`` (this rank's local-minus-average
gradient of step t-k, negated) the rank changes its optimizer state to what
it would be had it applied G_{t-k} instead of g^i_{t-k} at step t-k::

    v <- v + mu^(k-1) delta                  (v before step t's update holds g_{t-k} with weight mu^(k-1))
    w <- w - (sum_{m=0}^{k-1} lr_{t-k+m} s_m) delta
         s_m: the share of step t-k+m in a unit gradient applied at step t-k:
              Nesterov (1 + mu) at m = 0, mu^(m+1) after; heavy ball mu^m; plain SGD 1, then 0
    then the optimizer's step with d = g^i_t

so that, after every step, a rank's weights and momentum buffer are exactly
those of the optimizer fed the averages G_0 .. G_{t-k} and then its own last
k gradients g^i_{t-k+1} .. g^i_t (for k = 1: v^i = v_sync + (g^i_t - G_t),
no older noise). The ranks then differ by their last k gradients only, the
least any rule that applies the fresh local gradient can leave: at step t a
rank does not yet know G_{t-k+1} .. G_t. The mean over ranks of every
correction is 0, so the averaged model is ``local``'s (and sync's) in the
same way: mean_i g^i_t applied at once. With every rank on the same data
(g^i = G) delta = 0 and the rule is sync.

Our formulation (a reconstruction in the spirit of the delayed-correction
rules of the ``local`` family, OD-SGD / DaSGD / CD-SGD, and of the spike
compensation of Kosson et al. 2021, which adds a late gradient's missed
displacement at arrival); not a transcription of a paper. Exact for
weight_decay = 0 (the grids' setting); with weight decay, the decay that
the swapped gradient's displacement would have had over the k steps is left
out (second order in lr * weight_decay).

The arithmetic is NumPy in :meth:`LocalRewindPredictor.apply_step`.
"""
from __future__ import annotations

from collections import deque

import numpy as np

from .local_predictors import LocalPredictor
from .predictor_base import Predictor

__all__ = ["LocalRewindPredictor", "impulse_shares"]


def impulse_shares(mu: float, nesterov: bool, k: int) -> np.ndarray:
    """float64 (k,): the share of steps 0..k-1 after it in the displacement of
    a unit gradient applied at step 0 (per unit learning rate), for
    minips.optim's SGD: Nesterov ``(1 + mu, mu^2, mu^3, ...)``, heavy ball
    ``(1, mu, mu^2, ...)``, plain SGD (mu = 0) ``(1, 0, 0, ...)``."""
    m = np.arange(k, dtype=np.float64)
    if nesterov:
        return np.where(m == 0, 1.0 + mu, mu ** (m + 1))
    return mu ** m  # 0 ** 0 = 1: plain SGD moves only at the step itself


class LocalRewindPredictor(LocalPredictor):
    """``local-rewind``: ``local`` whose swap of g^i_{t-k} for G_{t-k} is made
    in the optimizer's state, where g^i_{t-k} went (see the module docstring)::

        direction handed to the optimizer at step t:  g^i_t   (fill and after)
        before it, for t >= k:  delta = G_{t-k} - g^i_{t-k}
                                v <- v + mu^(k-1) delta
                                w <- w - sum_m lr_{t-k+m} s_m delta

    The predictor owns the optimizer step (pseudo-sync calls
    :meth:`apply_step`); the optimizer's momentum buffer and learning rate are
    read from it, so checkpoints keep the usual optimizer state.

    Args:
        staleness: k >= 1.

    Diagnostics: none.
    """

    name = "local-rewind"
    Options = Predictor.Options  # no options (local's sync_warmup is not one of them)
    clip_norm_refused = ("its swap of g_{t-k} for G_{t-k} is made in the weights and the momentum buffer, at the "
                         "weight g_{t-k} went in with, which clipping changes; use pseudo-sync:local")

    def __init__(self, staleness: int = 1, **options):
        super().__init__(staleness, **options)
        self.delta = None                    # G_{t-k} - g^i_{t-k}, applied by the next apply_step
        self.lrs = deque(maxlen=self.k)      # lr of the last k steps, oldest first

    def predict(self, G, w_now, w_then):
        g_new, g_old, _, _ = self._new_and_old()
        self.diagnostics = {}
        self.delta = G - g_old               # swap g_{t-k} for G_{t-k} in the state (apply_step)
        return g_new.copy()

    def apply_step(self, optimizer, w: np.ndarray, d: np.ndarray) -> None:
        """Swap g^i_{t-k} for G_{t-k} in v and w, then the optimizer's step with d = g^i_t."""
        if self.delta is not None:
            mu = optimizer.momentum
            shares = impulse_shares(mu, optimizer.nesterov, self.k)
            moved = float(np.dot(np.asarray(self.lrs, np.float64), shares))   # what g_{t-k} moved w by, per unit
            w -= np.float32(moved) * self.delta
            if mu:
                optimizer.buffers[0] += np.float32(mu ** (self.k - 1)) * self.delta
            self.delta = None
        optimizer.apply(0, w, d)
        self.lrs.append(float(optimizer.lr))

    def state_dict(self):
        return {**super().state_dict(), "lrs": list(self.lrs)}

    def load_state_dict(self, state):
        super().load_state_dict(state)
        self.lrs = deque((float(x) for x in state["lrs"]), maxlen=self.k)
