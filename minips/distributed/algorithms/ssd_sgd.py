"""SSD-SGD: a global gradient reduction only every k steps, posted nonblocking
and applied k - 1 steps later, with local compensation in between
(**reconstruction**).

Y. Xu, D. Dong, Y. Zhao, W. Xu, X. Liao, "SSD-SGD: Communication
Sparsification for Distributed Deep Learning Training", arXiv:2012.05396
(2020); predecessor OD-SGD (one-step delay), arXiv:2005.06728. Only the
abstracts could be read: what is certain is a synchronous warm-up stage, a
steps-delay stage in which the global (synchronous) update happens only every
k iterations while the workers keep updating their local weights, and "GLU",
global gradient for local update, which drives those local updates with
global gradient information. The rule below is docs/specifications.md section 18
adapted to an allreduce engine (the paper uses a parameter server); the exact
local-update rule of the paper is unknown.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .base import Algorithm

__all__ = ["SSDSGD"]


class SSDSGD(Algorithm):
    """SSD-SGD (reconstruction): sync warm-up, then one allreduce of the
    accumulated gradient every k steps, applied k - 1 steps later.

    Pseudo-code (rank i, step t; ``x`` the global model and ``w`` the working
    weights, both identical on every rank; ``opt`` the optimizer, whose
    momentum buffer belongs to ``x``; T_w warm-up steps; period k)::

        g_i = gradient at w;  acc_i += g_i
        k_t = 1 if t < T_w else k;  j = phase of t in its period (0..k_t-1)
        if j == k_t - 1:                   # end of a period: post the period's sum
            req = Iallreduce(acc_i); acc_i = 0
        if j == (k_t - 2) mod k_t and a request is posted:  # k_t - 1 steps after posting
            G = wait(req) / (P k_t)        # the period's mean gradient
            x0 = x; x = opt(x, G) applied k_t times   # the delayed global update
            D = (x0 - x) / k_t             # its mean move per step
            w = x                          # re-anchor the working weights
        else:
            w = w - D                      # GLU: a local step along the last global update

    With k = 1 (and in every warm-up step) the request is posted and waited
    in the same step and ``w = x = opt(x, mean_i g_i)``: synchronous SGD.
    With k >= 2 the allreduce of period n's gradients runs while the k - 1
    local steps of period n + 1 compute (one allreduce per k steps, hidden
    behind k - 1 steps of compute); those local steps repeat the last global
    update (the compensation: the global model will move by about as much once
    the period's gradients arrive). D and x are global, so every rank holds
    the same weights at every step (``replicated``; the Trainer can check the
    hashes). Only ``acc_i`` is per rank (``per_rank_state``: a checkpoint
    keeps every rank's state).

    Options (spec ``ssd-sgd:period=4:warmup=200``):
        period: k >= 1 (default 2): steps between global reductions; each is
            applied k - 1 steps after it was posted. 1 = synchronous SGD.
            (k = 4 diverged on the mini set at lr 0.05 with Nesterov momentum
            0.9, docs/bench/compression/p4-ssd-sgd-period4-diverged.txt; k = 2
            trained: the default.)
        warmup: T_w synchronous steps first (default -1 = a tenth of the
            planned steps; the paper's warm-up length was not available).

    Logged per step: ``period`` (k_t) and ``global_update`` (1 on the steps
    that apply a global update). Phases: post, wait, update, glu.

    Raises:
        ValueError: period < 1, warmup < -1; at the first step, warmup = -1
            without a planned length (outside the Trainer).
    """

    name = "ssd-sgd"
    family = "compression"
    gradient_allreduce_per_step = False  # one allreduce every k steps
    per_rank_state = True                 # acc_i differs between ranks (the weights do not)
    paper = ("Y. Xu, D. Dong, Y. Zhao, W. Xu, X. Liao, SSD-SGD: Communication Sparsification for Distributed Deep "
             "Learning Training, arXiv:2012.05396 (2020); reconstruction, see docs/specifications.md section 18")
    POSITIONAL = ("period",)

    @dataclass
    class Options:
        period: int = field(default=2, metadata={
            "help": "k: steps between global reductions, each applied k-1 steps after posting", "unit": "steps"})
        warmup: int = field(default=-1, metadata={
            "help": "synchronous warm-up steps; -1 = a tenth of the planned steps", "unit": "steps"})

        def validate(self):
            if self.period < 1:
                raise ValueError(f"period must be >= 1 (k steps between global reductions; 1 = synchronous SGD), "
                                 f"got {self.period}")
            if self.warmup < -1:
                raise ValueError(f"warmup must be >= 0 (synchronous steps first) or -1 (a tenth of the planned "
                                 f"steps), got {self.warmup}")

    @classmethod
    def step_time(cls, options, profile, P, net, phi=0.0) -> float:
        """A fraction s of the steps is synchronous (s = 1/10 for the default
        warm-up, else 0: the steady state), the rest posts one allreduce of
        the gradient every k steps, which k - 1 steps of compute can hide::

            A = allreduce(d);  hidden = min(A, (k - 1) compute)
            T = compute + s A + (1 - s) (phi hidden + A - hidden) / k

        k = 1 is sync's ``compute + A``."""
        a = net.allreduce_time(profile.grad_bytes, P)
        k = options.period
        hidden = min(a, (k - 1) * profile.compute)
        s = 0.1 if options.warmup == -1 else 0.0
        return profile.compute + s * a + (1 - s) * (phi * hidden + a - hidden) / k

    @classmethod
    def default_label(cls, options) -> str:
        return f"{cls.name}:period={options.period}"

    def setup(self) -> None:
        n = self.flat.weights.size
        self.x = self.flat.weights.copy()          # the global model (set again at start())
        self.acc = np.zeros(n, np.float32)         # this rank's gradients since the last post
        self.send = np.zeros(n, np.float32)        # the buffer in flight
        self.D = np.zeros(n, np.float32)           # the last global update's mean move per step
        self.req = None                            # the reduction in flight
        self.arrived: np.ndarray | None = None     # a completed sum not yet applied (after drain)
        self._warmup: int | None = None

    def start(self, broadcast: bool = True) -> None:
        super().start(broadcast)
        if self.step_count == 0:
            self.x[...] = self.flat.weights

    def warmup_steps(self) -> int:
        """T_w: the option, or a tenth of ``ctx.planned_steps``.

        Raises:
            ValueError: warmup = -1 without a planned length.
        """
        if self._warmup is None:
            w, planned = self.options.warmup, self.ctx.planned_steps
            if w == -1 and not planned:
                raise ValueError(f"{self.name}: warmup=-1 (a tenth of training) needs the planned number of steps, "
                                 "which only the Trainer knows; give warmup=N")
            self._warmup = planned // 10 if w == -1 else w
        return self._warmup

    def step(self) -> None:
        t, tw = self.step_count, self.warmup_steps()
        k = 1 if t < tw else self.options.period       # warm-up: k = 1 is synchronous SGD
        j = 0 if t < tw else (t - tw) % k               # phase in the period
        self.acc += self.flat.grads[0]                  # acc_i += g_i
        if j == k - 1:                                  # end of a period: post its sum
            with self.timer.phase("post"):
                self.send[...] = self.acc
                self.acc.fill(0)
                self.req = self.comm.iallreduce(self.send, tag=("ssd", t))
        due = j == (k - 2) % k and (self.req is not None or self.arrived is not None)
        if due:                                         # k - 1 steps after posting
            self.global_update(k)
        else:
            with self.timer.phase("glu"):
                self.flat.weights -= self.D             # GLU: repeat the last global move
        self.log = {"period": k, "global_update": int(due)}
        self.end_step()

    def global_update(self, k: int) -> None:
        """``x = opt^k(x, G)`` with G the period's mean gradient; ``w = x``."""
        self._complete()
        G = self.arrived
        self.arrived = None
        with self.timer.phase("update"):
            G *= np.float32(1.0 / (self.comm.size * k)) if self.comm.size * k > 1 else np.float32(1.0)
            before = self.x.copy()
            for _ in range(k):                          # k optimizer steps with the period's mean gradient
                self.optimizer.apply(0, self.x, G)
            np.subtract(before, self.x, out=self.D)
            if k > 1:
                self.D *= np.float32(1.0 / k)
            self.flat.weights[...] = self.x

    def _complete(self) -> None:
        if self.req is not None:
            with self.timer.phase("wait"):
                self.req.wait()
            self.arrived, self.req = self.send.copy(), None

    def drain(self) -> None:
        """Complete a reduction in flight and keep its sum (applied at its due step)."""
        self._complete()
        super().drain()

    def report(self) -> dict:
        return {"warmup_steps": self._warmup}

    # --- checkpoint state ------------------------------------------------------------
    def state_dict(self) -> dict:
        """The global model, D, a completed sum not yet applied, this rank's
        ``acc_i``. Call :meth:`drain` first."""
        if self.req is not None:
            raise RuntimeError(f"{self.name} state_dict with a reduction in flight: call drain() first")
        return {**super().state_dict(), "x": self.x.copy(), "D": self.D.copy(),
                "arrived": None if self.arrived is None else self.arrived.copy(),
                "acc": self.acc.copy(),
                "warmup_steps": -1 if self._warmup is None else self._warmup}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.x[...] = np.asarray(state["x"], np.float32)
        self.D[...] = np.asarray(state["D"], np.float32)
        self.arrived = None if state.get("arrived") is None else np.asarray(state["arrived"], np.float32).copy()
        self.acc[...] = np.asarray(state["acc"], np.float32)
        w = int(state.get("warmup_steps", -1))
        self._warmup = None if w < 0 else w
