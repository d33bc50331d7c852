"""SGD with momentum, Nesterov momentum, weight decay and global-norm gradient
clipping; learning-rate schedules.

Update rule (as PyTorch's ``torch.optim.SGD``, Sutskever et al. ICML 2013 for
Nesterov, after ``torch.nn.utils.clip_grad_norm_`` when ``clip_norm > 0``),
for weights ``w`` and a gradient / update direction ``d``::

    d = d * min(1, clip_norm / (||d|| + 1e-6))   # only with clip_norm > 0; ||d|| over every parameter
    d = d + weight_decay * w          # L2 penalty, on the fresh weights
    v = momentum * v + d              # heavy-ball buffer (v = d on the first step)
    step = d + momentum * v  if nesterov else  v
    w = w - lr * step

The distributed algorithms call ``apply(w, d)`` with the direction they decided
on (the averaged gradient, or a predicted one) rather than ``p.grad``, on the
model's weights as one flat vector, so the norm that clipping uses is the
global norm over every parameter tensor, as ``clip_grad_norm_``'s. Where that
direction is the same on every rank (sync and every rule that keeps the
replicas identical: the averaged gradient, or a forecast made from averages),
every rank computes the same norm and the same factor, and the replicas stay
identical; where ranks apply different directions (``local``, local SGD,
gossip), each rank clips its own.
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["SGD", "Schedule", "ConstantLR", "WarmupLR", "StepLR", "CosineLR", "make_schedule"]


class SGD:
    """Stochastic gradient descent.

    Args:
        params: list of Parameters (anything with ``.data`` and ``.grad`` arrays).
        lr: learning rate (> 0).
        momentum: heavy-ball coefficient in [0, 1).
        nesterov: use Nesterov momentum (needs momentum > 0).
        weight_decay: L2 coefficient (>= 0).
        clip_norm: the largest global L2 norm of a direction (> 0), or 0 (the
            default: no clipping). A direction whose norm over all parameters
            is above it is scaled down to it before weight decay and momentum,
            as ``torch.nn.utils.clip_grad_norm_(params, clip_norm)`` does to
            the gradients before ``optimizer.step()``.

    Attributes:
        clip_factor: the factor the last direction was scaled by (1.0 when not
            clipped); ``clips``: how many directions were clipped so far.

    Raises:
        ValueError: a hyper-parameter is out of range (the message says which).
    """

    def __init__(self, params, lr: float, momentum: float = 0.0, nesterov: bool = False,
                 weight_decay: float = 0.0, clip_norm: float = 0.0):
        if not lr > 0:
            raise ValueError(f"SGD: lr must be > 0, got {lr}")
        if not 0 <= momentum < 1:
            raise ValueError(f"SGD: momentum must be in [0, 1), got {momentum}")
        if nesterov and momentum == 0:
            raise ValueError("SGD: nesterov=True needs momentum > 0")
        if weight_decay < 0:
            raise ValueError(f"SGD: weight_decay must be >= 0, got {weight_decay}")
        if not (math.isfinite(clip_norm) and clip_norm >= 0):
            raise ValueError(f"SGD: clip_norm must be a finite number >= 0 (0 = no clipping), got {clip_norm}")
        self.params = list(params)
        self.lr, self.momentum, self.nesterov, self.weight_decay = lr, momentum, nesterov, weight_decay
        self.clip_norm = float(clip_norm)
        self.clip_factor, self.clips = 1.0, 0
        self.base_lr = lr
        self.buffers: list[np.ndarray | None] = [None] * len(self.params)

    def set_params(self, params):
        """Rebind to other parameters (e.g. one flat buffer). Only before the
        first step, since momentum buffers belong to the old layout.

        Raises:
            RuntimeError: a momentum buffer already exists.
        """
        if any(b is not None for b in self.buffers):
            raise RuntimeError("SGD.set_params after the first step would lose the momentum buffers")
        self.params = list(params)
        self.buffers = [None] * len(self.params)

    def clip_coefficient(self, directions) -> float:
        """The factor ``min(1, clip_norm / (norm + 1e-6))`` for these directions
        (arrays, one per parameter; ``norm`` is the L2 norm of all of them
        together: each array's squared norm is one BLAS dot product of the
        array in float64, summed in float64), as ``torch.nn.utils.clip_grad_norm_``
        computes it; 1.0 when ``clip_norm`` is 0. A NaN norm gives a NaN factor
        and an infinite one 0, as in torch (without ``error_if_nonfinite``): a
        diverged direction is not hidden, the run stops on its loss."""
        if not self.clip_norm:
            return 1.0
        sq = 0.0
        for a in directions:
            if a is not None:  # float64 squares: a float32 dot overflows above a norm of ~1.8e19, zeroing it
                v = a.ravel().astype(np.float64)
                sq += float(np.dot(v, v))
        c = self.clip_norm / (math.sqrt(sq) + 1e-6)
        return c if math.isnan(c) else min(1.0, c)

    def _clipped(self, ds, c: float) -> list:
        """``ds`` scaled by the factor ``c`` (each in its own dtype; ``None`` kept; the arrays
        themselves when ``c >= 1``), recorded in :attr:`clip_factor` and :attr:`clips`. A NaN
        factor scales too: the NaN reaches the loss, which stops the run."""
        self.clip_factor = c
        if c >= 1.0:
            return list(ds)
        self.clips += 1
        return [None if d is None else (d * np.asarray(c, dtype=d.dtype)).astype(d.dtype, copy=False) for d in ds]

    def clip(self, d: np.ndarray) -> np.ndarray:
        """``d`` (any shape; float32 in the algorithms) scaled to norm ``clip_norm``
        when its norm is larger (a new array of ``d``'s shape and dtype; ``d``
        itself when nothing is clipped, or when ``clip_norm`` is 0). For an algorithm that owns the
        optimizer step (pseudo-sync's ``spike``) and applies the rule itself.
        Records :attr:`clip_factor` and counts :attr:`clips`."""
        return self._clipped([d], self.clip_coefficient([d]))[0]

    def apply(self, i: int, w: np.ndarray, d: np.ndarray) -> None:
        """Update ``w`` (parameter ``i``'s array) in place with direction ``d``.

        With ``clip_norm`` > 0 and more than one parameter, call :meth:`step`
        (the norm must cover every parameter); the algorithms hold one flat
        parameter, so ``d`` is the whole direction.

        Raises:
            RuntimeError: clipping asked of one of several parameters.
        """
        if self.clip_norm:
            if len(self.params) > 1:
                raise RuntimeError("SGD.apply clips by the norm of one parameter's direction, but clip_norm needs "
                                   "the norm over all of them: call step(directions) instead")
            d = self.clip(d)
        self._apply(i, w, d)

    def _apply(self, i: int, w: np.ndarray, d: np.ndarray) -> None:
        if self.weight_decay:
            d = d + self.weight_decay * w
        if self.momentum:
            v = self.buffers[i]
            if v is None:
                v = self.buffers[i] = np.array(d, dtype=w.dtype, copy=True)
            else:
                v *= self.momentum
                v += d
            d = d + self.momentum * v if self.nesterov else v
        w -= self.lr * d

    def step(self, directions=None) -> None:
        """One update of every parameter, with ``p.grad`` or the given directions.

        Args:
            directions: optional list of arrays (one per parameter) to use
                instead of the gradients.
        """
        ds = [p.grad if directions is None else directions[i] for i, p in enumerate(self.params)]
        ds = self._clipped(ds, self.clip_coefficient(ds))  # one global norm over every parameter, as clip_grad_norm_
        for i, (p, d) in enumerate(zip(self.params, ds)):
            if d is not None:
                self._apply(i, p.data, d)

    def zero_grad(self) -> None:
        """Zero the gradients in place."""
        for p in self.params:
            if p.grad is not None:
                p.grad[...] = 0

    def state_dict(self) -> dict:
        """Hyper-parameters and momentum buffers (copies)."""
        return {"lr": self.lr, "momentum": self.momentum, "nesterov": self.nesterov,
                "weight_decay": self.weight_decay, "clip_norm": self.clip_norm, "clips": self.clips,
                "buffers": [None if b is None else b.copy() for b in self.buffers]}

    def load_state_dict(self, state: dict) -> None:
        """Restore from :meth:`state_dict`.

        Raises:
            ValueError: the number or shapes of buffers do not match the parameters.
        """
        bufs = state["buffers"]
        if len(bufs) != len(self.params):
            raise ValueError(f"SGD state has {len(bufs)} momentum buffers, the optimizer has "
                             f"{len(self.params)} parameters")
        for i, (b, p) in enumerate(zip(bufs, self.params)):
            if b is not None and np.shape(b) != p.shape:
                raise ValueError(f"SGD state buffer {i} has shape {np.shape(b)}, parameter has {p.shape}")
        self.lr = state["lr"]
        self.clips = int(state.get("clips", 0))  # a checkpoint from before clipping existed: none
        self.buffers = [None if b is None else np.array(b, dtype=p.dtype) for b, p in zip(bufs, self.params)]


# --- learning-rate schedules ---------------------------------------------------
class Schedule:
    """Maps a step number (0-based) to a learning rate. Call it: ``lr = sched(step)``."""

    def __call__(self, step: int) -> float:  # pragma: no cover - abstract
        raise NotImplementedError


class ConstantLR(Schedule):
    """The same learning rate at every step."""
    def __init__(self, lr: float):
        self.lr = lr

    def __call__(self, step):
        return self.lr


class WarmupLR(Schedule):
    """Linear warm-up from ``lr/warmup_steps`` to the inner schedule's value over
    ``warmup_steps`` steps (Goyal et al., "Accurate, Large Minibatch SGD", 2017)."""

    def __init__(self, inner: Schedule, warmup_steps: int):
        if warmup_steps < 0:
            raise ValueError(f"warmup_steps must be >= 0, got {warmup_steps}")
        self.inner, self.warmup_steps = inner, warmup_steps

    def __call__(self, step):
        lr = self.inner(step)
        if step < self.warmup_steps:
            return lr * (step + 1) / self.warmup_steps
        return lr


class StepLR(Schedule):
    """``lr * gamma ** (step // step_size)``."""

    def __init__(self, lr: float, step_size: int, gamma: float = 0.1):
        if step_size < 1:
            raise ValueError(f"step_size must be >= 1, got {step_size}")
        self.lr, self.step_size, self.gamma = lr, step_size, gamma

    def __call__(self, step):
        return self.lr * self.gamma ** (step // self.step_size)


class CosineLR(Schedule):
    """Cosine decay from ``lr`` to ``min_lr`` over ``total_steps``
    (Loshchilov & Hutter, SGDR, ICLR 2017, without restarts)."""

    def __init__(self, lr: float, total_steps: int, min_lr: float = 0.0):
        if total_steps < 1:
            raise ValueError(f"total_steps must be >= 1, got {total_steps}")
        self.lr, self.total_steps, self.min_lr = lr, total_steps, min_lr

    def __call__(self, step):
        t = min(step, self.total_steps) / self.total_steps
        return self.min_lr + 0.5 * (self.lr - self.min_lr) * (1 + math.cos(math.pi * t))


def make_schedule(name: str, lr: float, total_steps: int, warmup_steps: int = 0,
                  step_size: int | None = None, gamma: float = 0.1) -> Schedule:
    """Build a schedule by name: ``constant``, ``step`` or ``cosine``, wrapped in
    a linear warm-up when ``warmup_steps > 0``.

    Raises:
        ValueError: unknown name (the valid ones are listed).
    """
    if name == "constant":
        s = ConstantLR(lr)
    elif name == "step":
        s = StepLR(lr, step_size or max(1, total_steps // 3), gamma)
    elif name == "cosine":
        s = CosineLR(lr, max(1, total_steps))
    else:
        raise ValueError(f"unknown lr schedule {name!r}; choose constant, step or cosine")
    return WarmupLR(s, warmup_steps) if warmup_steps > 0 else s
