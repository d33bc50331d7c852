"""Delay compensations for pseudo-synchronous SGD that keep the replicas identical.

Each rule turns the averaged gradient that just arrived, ``G_s`` (computed at
``w_s``, s = t - k), into this step's update using only replicated quantities
(the weights, the optimizer's momentum, global averages), so every rank
applies the same update and the weights stay bit-identical, as with ``last``.

- :class:`SpikeCompensation` (``spike``): Kosson et al., "Pipelined
  Backpropagation at Scale", MLSys 2021. The arriving gradient enters the
  momentum as usual, but the step adds at once what momentum would already have
  moved the weights by, had the gradient been on time; optional linear weight
  prediction computes the gradient at ``w_t + c (w_t - w_{t-1})``. This rule
  owns the optimizer step (:meth:`SpikeCompensation.apply_step`).
- :class:`DCASGD` (``dc-asgd``): Zheng et al., "Asynchronous Stochastic
  Gradient Descent with Delay Compensation", ICML 2017: a first-order Taylor
  correction with the diagonal outer-product approximation of the Hessian,
  ``G_s + lambda G_s * G_s * (w_t - w_s)``, with the paper's adaptive lambda.
- :class:`GapAware` (``gap-aware``): Barkai, Hakimi & Schuster, "Gap-Aware
  Mitigation of Gradient Staleness", ICLR 2020: each coordinate of the stale
  gradient divided by ``1 + |w_t - w_s| / C``.

The hooks pseudo-sync gives a predictor (see
:mod:`minips.distributed.algorithms.pseudo_sync`): ``forecast(G, w_now,
w_then)`` (the direction), ``lookahead_weights(w, optimizer)`` (where the next
gradient is computed: weight prediction), and, for a rule that owns the
optimizer step, ``apply_step(optimizer, w, d)``. All arrays are float32 (n,),
the flat weights; all rules are element-wise NumPy.

Why none of them can close the gap to sync at large steps: docs/accuracy.md,
section 1 (the stability tables); each rule next to its code: docs/distributed.md.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .predictor_base import Predictor

__all__ = ["SpikeCompensation", "DCASGD", "GapAware", "COMPENSATIONS", "spike_coefficients"]


def spike_coefficients(mu: float, k: int, nesterov: bool) -> tuple[float, float]:
    """The spike-compensated step ``lr (a v + b G)`` (v already updated with G):
    ``a = mu^j``, ``b = (1 - mu^j) / (1 - mu)`` with j = k (heavy ball) or
    j = k + 1 (Nesterov; derivation in :class:`SpikeCompensation`). k = 0 gives
    the optimizer's own step (a = 1, b = 0 for heavy ball; a = mu, b = 1 for
    Nesterov). Returns (a, b) as Python floats."""
    j = k + 1 if nesterov else k
    a = mu ** j
    b = (1.0 - a) / (1.0 - mu) if mu != 1 else float(j)
    return a, b


class SpikeCompensation(Predictor):
    """Spike compensation (SC) with optional linear weight prediction (LWP).

    Kosson, Chiley, Venigalla, Hestness & Koster, "Pipelined Backpropagation at
    Scale: Training Large Models without Batches", MLSys 2021, for heavy ball
    (momentum mu, learning rate lr, delay k, G the gradient arriving now)::

        v <- mu v + G
        w <- w - lr (mu^k v + (1 - mu^k) / (1 - mu) G)

    Why: a gradient g applied on time at step s moves the weights by lr mu^j g
    at step s + j (heavy ball). Arriving k steps late, it missed the steps
    s..s+k-1, worth lr (1 + mu + ... + mu^(k-1)) g = lr (1 - mu^k)/(1 - mu) g:
    SC adds them at arrival (the "spike"), and scales the momentum term by mu^k
    so that every later step moves the weights by exactly what sync's would
    have (mu^k v holds g with weight mu^(k+j) at step s + k + j). So once a
    gradient has arrived, its total contribution equals sync's, step for step.

    Nesterov (PyTorch's form, which minips.optim uses: ``v <- mu v + g``,
    ``w <- w - lr (g + mu v)``). Derivation, for a unit impulse g at step 0:
    sync moves the weights by (1 + mu) at step 0 and by mu^(j+1) at step j >= 1,
    so by the arrival step k it has moved sum_{i=0}^{k+1} mu^i = (1 - mu^(k+2))
    / (1 - mu) in all. Look for a step ``lr (a v + b G)`` with v <- mu v + G:
    after arrival v = mu^j g at step k + j, and the step must equal sync's
    mu^(k+j+1), so a = mu^(k+1); at arrival (v = g) a + b must equal the sum
    above, so b = (1 - mu^(k+2))/(1 - mu) - mu^(k+1) = (1 - mu^(k+1))/(1 - mu).
    Nesterov SC is heavy-ball SC with k + 1::

        v <- mu v + G
        w <- w - lr (mu^(k+1) v + (1 - mu^(k+1)) / (1 - mu) G)

    (k = 0 gives mu v + G: Nesterov itself.) Weight decay, if any, is added to G
    first (``G + wd w_t``), as minips.optim does, and compensated with it; with
    ``--clip-norm`` G is clipped before that, as the optimizer's own step does.

    Linear weight prediction (LWP, ``lwp = c > 0``): the gradient of step t is
    computed at ``w_t + c (w_t - w_{t-1})``, where ``w_t - w_{t-1}`` is the last
    applied step (zero during the pipeline fill), so that it is closer to where
    it will be applied. Kosson et al. extrapolate the velocity over the delay;
    c = k/2 is a good start when SC already compensates the momentum part
    (docs/accuracy.md, section 1, has the stability of each c).

    Args:
        staleness: k >= 1.
        sc: apply spike compensation (default True); False leaves the
            optimizer's step as it is (LWP alone, or ``last`` when lwp = 0).
        lwp: the weight-prediction horizon c in steps, >= 0 (default 0: off).

    Raises:
        ValueError: lwp < 0 (or not finite).

    Diagnostics: none beyond the base class's (cos_forecast, rel_error).
    """

    name = "spike"

    @dataclass
    class Options:
        sc: bool = field(default=True, metadata={
            "help": "apply spike compensation (false: the optimizer's step as it is)"})
        lwp: float = field(default=0.0, metadata={"help": "weight-prediction horizon (0 = off)", "unit": "steps"})

        def validate(self):
            if not (np.isfinite(self.lwp) and self.lwp >= 0):
                raise ValueError(f"spike: lwp must be a finite number >= 0 (the weight-prediction horizon in "
                                 f"steps; 0 = off, about k/2 with sc), got {self.lwp}")

    def __init__(self, staleness: int = 1, **options):
        super().__init__(staleness, **options)
        self.sc, self.lwp = bool(self.sc), float(self.lwp)
        self.last_step = None  # w_t - w_{t-1}, the step applied last (for LWP)

    def forecast(self, G, w_now, w_then):
        return G.copy()  # the compensation is in the step, not in the direction

    def apply_step(self, optimizer, w: np.ndarray, d: np.ndarray) -> None:
        """``w <- SC step(w, d)`` in place, keeping the optimizer's momentum
        buffer (so checkpoints and the optimizer's state stay as usual)."""
        w_before = w.copy() if self.lwp else None
        mu = optimizer.momentum
        if not self.sc or not mu:  # no momentum: nothing to compensate
            optimizer.apply(0, w, d)
        else:
            d = optimizer.clip(d)                  # --clip-norm, as in the optimizer's own step
            if optimizer.weight_decay:
                d = d + np.float32(optimizer.weight_decay) * w
            v = optimizer.buffers[0]
            if v is None:                          # the first step: v = d (as minips.optim)
                v = optimizer.buffers[0] = np.array(d, dtype=w.dtype, copy=True)
            else:
                v *= np.float32(mu)
                v += d                             # v <- mu v + G
            a, b = spike_coefficients(mu, self.k, optimizer.nesterov)
            w -= np.float32(optimizer.lr) * (np.float32(a) * v + np.float32(b) * d)
        if self.lwp:
            self.last_step = w - w_before

    def lookahead_weights(self, w, optimizer):
        if not self.lwp or self.last_step is None:
            return None
        return w + np.float32(self.lwp) * self.last_step  # w_t + c (w_t - w_{t-1})

    def state_dict(self):
        return {**super().state_dict(), "last_step": self.last_step}

    def load_state_dict(self, state):
        super().load_state_dict(state)
        s = state.get("last_step")
        self.last_step = None if s is None else np.array(s, dtype=np.float32)


class DCASGD(Predictor):
    """Delay-compensated ASGD (Zheng, Meng, Wang, Chen, Yu, Ma & Liu, ICML 2017).

    The paper's update (Algorithm 3, on the parameter server, g = the delayed
    gradient computed at the backup weights w_bak = w_{t-k})::

        MeanSquare(t) = m MeanSquare(t-1) + (1 - m) g * g          (DC-ASGD-a)
        lambda_t      = lambda_0 / sqrt(MeanSquare(t))              (per coordinate)
        w_{t+1}       = w_t - lr (g + lambda_t g * g * (w_t - w_bak))

    ``g * g`` is the diagonal of the outer-product (Fisher) approximation of the
    Hessian, so the correction is a per-coordinate first-order Taylor step from
    w_{t-k} to w_t. Here the corrected gradient is the direction handed to the
    optimizer (momentum acts on it), as pseudo-sync does for every predictor.
    With ``adaptive = False`` lambda is the constant lambda_0 (DC-ASGD-c).
    MeanSquare starts at 0 without bias correction, as in the paper; ``eps`` is
    added to sqrt(MeanSquare) to guard the division.

    Args:
        staleness: k >= 1.
        lambda0: lambda_0 >= 0 (default 2, the paper's CIFAR-10 DC-ASGD-a
            setting; 0 gives ``last``).
        m: the MeanSquare smoothing in [0, 1) (default 0.95, the paper's).
        adaptive: DC-ASGD-a (default) or DC-ASGD-c.
        eps: > 0, guards the division (default 1e-7).

    Raises:
        ValueError: an option out of range.

    Diagnostics: ``dc_ratio`` = ||correction|| / ||g||.
    """

    name = "dc-asgd"

    @dataclass
    class Options:
        lambda0: float = field(default=2.0, metadata={"help": "compensation strength (0 = none)"})
        m: float = field(default=0.95, metadata={"help": "MeanSquare smoothing, in [0, 1)"})
        adaptive: bool = field(default=True, metadata={"help": "DC-ASGD-a (false: DC-ASGD-c, lambda constant)"})
        eps: float = field(default=1e-7, metadata={"help": "guard of the division, in (0, 1e-2)"})

        def validate(self):
            if not (np.isfinite(self.lambda0) and self.lambda0 >= 0):
                raise ValueError(f"dc-asgd: lambda0 must be a finite number >= 0 (0 = no compensation), "
                                 f"got {self.lambda0}")
            if not 0 <= self.m < 1:
                raise ValueError(f"dc-asgd: m must be in [0, 1) (the MeanSquare smoothing; paper: 0.95), got {self.m}")
            if not 0 < self.eps < 1e-2:
                raise ValueError(f"dc-asgd: eps must be in (0, 1e-2) (it only guards a division), got {self.eps}")

    def __init__(self, staleness: int = 1, **options):
        super().__init__(staleness, **options)
        self.lambda0, self.m, self.adaptive, self.eps = (float(self.lambda0), float(self.m), bool(self.adaptive),
                                                         float(self.eps))
        self.mean_square = None

    def forecast(self, G, w_now, w_then):
        lam = np.float32(self.lambda0)
        if self.adaptive:
            if self.mean_square is None:
                self.mean_square = np.zeros_like(G)
            self.mean_square *= np.float32(self.m)                 # MeanSquare(t), updated first
            self.mean_square += np.float32(1 - self.m) * G * G
            lam = lam / (np.sqrt(self.mean_square) + np.float32(self.eps))
        corr = lam * G * G * (w_now - w_then)                      # lambda g*g*(w_t - w_{t-k})
        gn = float(np.linalg.norm(G))
        self.diagnostics["dc_ratio"] = float(np.linalg.norm(corr)) / gn if gn > 0 else 0.0
        return (G + corr).astype(np.float32, copy=False)

    def state_dict(self):
        ms = None if self.mean_square is None else self.mean_square.copy()
        return {**super().state_dict(), "mean_square": ms}

    def load_state_dict(self, state):
        super().load_state_dict(state)
        ms = state.get("mean_square")
        self.mean_square = None if ms is None else np.array(ms, dtype=np.float32)


class GapAware(Predictor):
    """Gap-aware damping of the stale gradient (Barkai, Hakimi & Schuster,
    ICLR 2020). The Gap is how far each weight moved since the gradient's
    weights, in units of a typical step C; the gradient is divided by it::

        Gap_t = 1 + |w_t - w_{t-k}| / C                 (per coordinate)
        d_t   = G_{t-k} / Gap_t
        C     = sqrt(S / (1 - beta^n)),  S = beta S + (1 - beta) (w_t - w_{t-1})^2

    C is per coordinate: the root of an exponential moving average of the
    squared steps that coordinate took (bias-corrected over the n steps seen),
    i.e. "the size of one step". This is a reconstruction: the paper's text was
    not available here; it follows the issue's description (C from a moving
    average of step sizes). A coordinate that never moved (C = 0) also has a
    zero gap and is not damped. ``fixed_c > 0`` uses that constant C instead
    (C -> infinity gives ``last``).

    Args:
        staleness: k >= 1.
        beta: smoothing of the squared steps in [0, 1) (default 0.99).
        fixed_c: a constant C > 0, or 0 (default) for the moving average.

    Raises:
        ValueError: an option out of range.

    Diagnostics: ``gap_mean`` (the mean of Gap_t over coordinates).
    """

    name = "gap-aware"

    @dataclass
    class Options:
        beta: float = field(default=0.99, metadata={"help": "step-size smoothing, in [0, 1)"})
        fixed_c: float = field(default=0.0, metadata={"help": "a constant C > 0, or 0 for the moving average"})

        def validate(self):
            if not 0 <= self.beta < 1:
                raise ValueError(f"gap-aware: beta must be in [0, 1) (the step-size smoothing), got {self.beta}")
            if not self.fixed_c >= 0:
                raise ValueError(f"gap-aware: fixed_c must be >= 0 (0 = C from the moving average of steps), "
                                 f"got {self.fixed_c}")

    def __init__(self, staleness: int = 1, **options):
        super().__init__(staleness, **options)
        self.beta, self.fixed_c = float(self.beta), float(self.fixed_c)
        self.S, self.n, self.w_last = None, 0, None

    def forecast(self, G, w_now, w_then):
        if self.w_last is not None:  # the step applied since the last arrival: w_t - w_{t-1}
            step = w_now - self.w_last
            self.S *= np.float32(self.beta)
            self.S += np.float32(1 - self.beta) * step * step
            self.n += 1
            self.w_last[...] = w_now
        else:
            self.S, self.w_last = np.zeros_like(G), w_now.copy()
        gap = np.abs(w_now - w_then)
        if self.fixed_c:
            gap /= np.float32(self.fixed_c)
        elif self.n:
            C = np.sqrt(self.S / np.float32(1 - self.beta ** self.n))
            np.divide(gap, C, out=gap, where=C > 0)   # C = 0: the coordinate never moved, gap is 0
        else:
            gap[...] = 0                              # no step yet: no scale, and no gap in the fill
        gap += np.float32(1)                          # Gap_t = 1 + |w_t - w_{t-k}| / C
        self.diagnostics["gap_mean"] = float(gap.mean())
        return G / gap

    def state_dict(self):
        arrays = {k: None if getattr(self, k) is None else getattr(self, k).copy() for k in ("S", "w_last")}
        return {**super().state_dict(), "n": self.n, **arrays}

    def load_state_dict(self, state):
        super().load_state_dict(state)
        self.n = int(state.get("n", 0))
        for k in ("S", "w_last"):
            v = state.get(k)
            setattr(self, k, None if v is None else np.array(v, dtype=np.float32))


#: name -> class; rows of the predictors' table (predictors.PREDICTORS)
COMPENSATIONS = {cls.name: cls for cls in (SpikeCompensation, DCASGD, GapAware)}
