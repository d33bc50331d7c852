"""``local-pull``: the ``local`` rule, with every rank's weights pulled towards the
ranks' mean of k steps ago, a mean each rank computes itself (issue 43).

Notation as in :mod:`.local_predictors`. Under ``local`` a rank's difference
from the ranks' mean, ``e^i_t = w^i_t - mean_j w^j_t``, steps along
``h (e^i_t - e^i_{t-k})`` plus its own batch noise: nothing pulls it back, and
its largest stable step is half of sync's (docs/accuracy.md, section 10).
Source of the correction: DaSGD (Zhou, Zhang, Li, Liu, Yang, Wang & Huang,
2020, "delayed averaging"), whose text we did not read; as it is described, the
ranks take local steps while the average of their *weights* is computed in the
background, and when it arrives each rank replaces its own weights of some steps
ago by that average, keeping the progress made since. This file is a
**reconstruction** of that correction, scaled by a pull, with one change: the
average of the weights is not sent.

- **Every rank knows the mean exactly, k steps late.** The ranks start from the
  same weights and momentum, and the optimizer is linear in the direction (SGD
  with momentum, Nesterov, weight decay; not clipping). The mean of the
  directions the ranks applied at step s is ``lambda G_s + (1 - lambda) G_{s-k}``
  (``lambda G_s`` in the fill, s < k; lambda = the correction weight, 1 for
  ``local``): the rank's own terms average to the averaged gradient. Once
  G_s has arrived (step s + k) a rank can apply that mean direction, with step
  s's learning rate, to a copy of the mean weights and momentum (the *shadow*,
  a second :class:`minips.optim.SGD` with the same hyper-parameters) and hold
  ``mean_j w^j_{s+1}`` to float32 rounding.
- **The pull.** At step t >= k, after the optimizer's step::

      e^i_{t-k} = w^i_{t-k} - shadow_{t-k}        (w^i_{t-k}: the weights G_{t-k} was computed at)
      w^i_{t+1} <- w^i_{t+1} - pull * e^i_{t-k}

  The pulls sum to zero over the ranks (the e^i of one step do), so the ranks'
  mean moves as under ``local``; each rank's difference gets a restoring force,
  k steps late, which damps only for a pull below :func:`pull_bound` (k) (the rule
  takes pulls up to it).
  Noise-free, k = 1, Nesterov 0.9, the difference's largest stable ``h * lr``
  rises from 0.679 (``local``) to 0.848 at pull 0.5 and 0.93 at 0.75, and with a
  correction weight 0.7 to 1.21 and 1.33 (the mean's is 1.48 there; sync's 1.357):
  :func:`minips.labs.stability.pull_deviation_transition`. With per-rank noise the
  staleness lab finds little of that gain, and at 32 ranks, lr 0.32, every setting
  tried diverged earlier than ``local`` (docs/accuracy.md section 11.5): a variant
  tried by issue 43, kept selectable, not the default.

The Iallreduce carries the gradient alone (the bytes of ``local``). The cost: the
shadow and its momentum buffer, the pending difference ``e``, and with lambda < 1
the last k averages (float32 (n,) each), and one optimizer step on the shadow per
step. ``local``'s synchronous start (``sync_warmup``) is not an option here: its
steps skip the predictor, so the shadow would miss them. (DGA, Zhu, Lin, Lu, Lin &
Han 2021, "delayed gradient averaging", corrects a rank's local gradient by the
delayed average as ``local`` does; it is not what this file adds.)

The arithmetic is NumPy in :meth:`LocalPullPredictor.predict` (the shadow's step)
and :meth:`LocalPullPredictor.apply_step` (the pull).
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from ...optim import SGD
from ...tensor import Tensor
from .local_predictors import LocalPredictor

__all__ = ["LocalPullPredictor", "pull_bound"]


def pull_bound(k: int) -> float:
    """The largest pull at staleness k: ``2 sin(pi / (4k + 2))`` (1 at k = 1, 0.618 at k = 2, 0.445
    at k = 3). With the gradient's feedback left out, a rank's difference under the pull alone
    follows ``e_{t+1} = e_t - pull e_{t-k}``, whose roots stay inside the unit circle exactly below
    this bound. At it one pair is on the circle: the offset is no longer damped, as under ``local``,
    where nothing damps it; above it, it grows. (Levin & May, 1976, give it as
    ``2 cos(k pi / (2k + 1))``, the same number; tests/test_local_pull.py checks it against the
    recursion's roots.)"""
    return 2.0 * math.sin(math.pi / (4 * k + 2))


class LocalPullPredictor(LocalPredictor):
    """``local-pull``: ``local`` (with its correction weight) plus a pull of each
    rank's weights towards the ranks' mean of k steps ago (see the module docstring)::

        direction at step t:  as local:correction_weight=lambda
        after the step, t >= k:  w^i <- w^i - pull (w^i_{t-k} - mean_j w^j_{t-k})

    The predictor owns the optimizer step (pseudo-sync calls :meth:`apply_step`).

    State: ``local``'s ring, the shadow mean weights and momentum (float32 (n,)),
    the learning rates of the last k steps, the last k averages (for lambda < 1).

    Args:
        staleness: k >= 1.
        pull: the share of the delayed difference taken back each step, in (0, :func:`pull_bound` (k)]
            (default 0.5; the bound is 1 at k = 1, 0.618 at k = 2, 0.445 at k = 3).
        correction_weight: lambda in (0, 1] (default 1: ``local``'s direction).

    Raises:
        ValueError: pull outside (0, :func:`pull_bound` (k)], or correction_weight outside (0, 1].

    Diagnostics: none.
    """

    name = "local-pull"
    clip_norm_refused = ("it computes the ranks' mean weights from the averaged gradients, which needs an optimizer "
                         "step linear in the direction, and clipping is not; use pseudo-sync:local")

    @dataclass
    class Options:
        pull: float = field(default=0.5, metadata={
            "help": "the share of a rank's difference from the ranks' mean of k steps ago taken back each step, "
                    "in (0, 2 sin(pi / (4k + 2))]: at most 1 at k = 1, 0.618 at k = 2"})
        correction_weight: float = field(default=1.0, metadata={
            "help": "the correction weight lambda in (0, 1]: d = G_{t-k} + lambda (g_t - g_{t-k})"})

        def validate(self):
            if not self.pull > 0:   # the upper bound depends on k: the constructor checks it
                raise ValueError(f"local-pull: pull must be > 0 (the share of the delayed difference taken back "
                                 f"each step), got {self.pull}")
            if not 0 < self.correction_weight <= 1:
                raise ValueError(f"local-pull: correction_weight must be in (0, 1] (1 = local's direction), "
                                 f"got {self.correction_weight}")

    def __init__(self, staleness: int = 1, **options):
        super().__init__(staleness, **options)
        self.pull = float(self.pull)
        bound = pull_bound(self.k)
        if self.pull > bound + 1e-12:  # (at k = 1 the bound is 1 up to rounding)
            raise ValueError(f"local-pull: pull must be at most {bound:.3f} at staleness {self.k} (a restoring force "
                             f"k steps late grows above it: 2 sin(pi / (4k + 2))), got {self.pull:g}")
        self.mean_w = None                     # the shadow: mean_j w^j_s for the next s to apply
        self.mean_opt = None                   # its SGD (momentum buffer), built at step 0 from the rank's optimizer
        self.lrs = deque(maxlen=self.k)        # lr of the last k steps, oldest first: lr_{t-k} at step t's predict
        self.averages = deque(maxlen=self.k)   # G_{s-k} .. G_{s-1} for the mean direction when lambda < 1
        self.e = None                          # w^i_{t-k} - mean_{t-k}, applied by the next apply_step

    def predict(self, G, w_now, w_then):
        """``local``'s direction (float32 (n,)) from ``G`` = G_{t-k} (float32 (n,)); on the way it
        records this rank's difference from the mean at step t-k (``w_then`` = w^i_{t-k}, float32
        (n,)), for :meth:`apply_step`, and steps the shadow from the mean of step t-k to t-k+1."""
        d = super().predict(G, w_now, w_then)
        s = self.t - 1 - self.k                # G is G_s, computed at w_then = w^i_s
        self.e = w_then - self.mean_w          # this rank's difference from the mean at step s
        mean_d = np.float32(self.lam) * G      # the ranks' mean direction at step s ...
        if self.lam != 1.0 and s >= self.k:    # ... lambda G_s + (1 - lambda) G_{s-k} after the fill
            mean_d = mean_d + np.float32(1 - self.lam) * self.averages[0]
        if self.lam != 1.0:
            self.averages.append(G.copy())
        self.mean_opt.lr = self.lrs[0]         # step s's learning rate
        self.mean_opt.apply(0, self.mean_w, mean_d)   # the shadow: mean_j w^j_{s+1}
        return d

    def apply_step(self, optimizer, w: np.ndarray, d: np.ndarray) -> None:
        """In place on this rank's weights ``w`` (float32 (n,)): the optimizer's step with ``d``,
        then, from step k on, the pull by the difference :meth:`predict` recorded. At step 0 it
        copies ``w`` (the same on every rank) as the shadow's start."""
        if self.mean_w is None:                # step 0: every rank holds the same weights and no momentum yet
            self.mean_w = w.copy()
            self.mean_opt = self._shadow_sgd(optimizer.state_dict())
        self.lrs.append(float(optimizer.lr))
        optimizer.apply(0, w, d)
        if self.e is not None:
            w -= np.float32(self.pull) * self.e   # towards the ranks' mean; the pulls sum to zero over ranks
            self.e = None

    def state_dict(self):
        return {**super().state_dict(), "lrs": list(self.lrs), "averages": [a.copy() for a in self.averages],
                "mean_w": None if self.mean_w is None else self.mean_w.copy(),
                "mean_v": None if self.mean_opt is None else self.mean_opt.state_dict()}

    def load_state_dict(self, state):
        super().load_state_dict(state)
        self.lrs = deque((float(x) for x in state["lrs"]), maxlen=self.k)
        self.averages = deque((np.array(a, np.float32) for a in state["averages"]), maxlen=self.k)
        self.mean_w = None if state["mean_w"] is None else np.array(state["mean_w"], np.float32)
        self.mean_opt = None
        if self.mean_w is not None:
            self.mean_opt = self._shadow_sgd(state["mean_v"])
            self.mean_opt.load_state_dict(state["mean_v"])

    def _shadow_sgd(self, hyper: dict) -> SGD:
        """An SGD on the shadow with the hyper-parameters of ``hyper`` (an SGD state_dict), without
        clipping (pseudo-sync refuses --clip-norm for this rule: ``clip_norm_refused``)."""
        return SGD([Tensor(self.mean_w)], lr=hyper["lr"], momentum=hyper["momentum"], nesterov=hyper["nesterov"],
                   weight_decay=hyper["weight_decay"])
