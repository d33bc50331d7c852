"""STL-SGD: local SGD whose communication period grows stage by stage.

Shen, Cheng, Liu, Xu, "STL-SGD: Speeding Up Local SGD with Stagewise
Communication Period", AAAI 2021 (35(11):9576-9584), arXiv:2006.06377.
The stage rules follow docs/specifications.md section 4 (the abstract and the stage
rules as recalled from the paper; its full pseudo-code was not re-read).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .local_sgd import LocalSGD

__all__ = ["STLSGD"]


class STLSGD(LocalSGD):
    """STL-SGD: local SGD in stages that halve the lr, double in length and lengthen the period.

    Pseudo-code (stage s = 0, 1, ...; ``opt`` is this rank's optimizer, with
    its own momentum buffer)::

        eta_0 = eta_1 (the schedule's lr); T_0 = T1; k_0 = k1
        for stage s:
            for T_s steps:
                w_i = opt(w_i, g_i)          # (non-convex variant: g_i + (w_i - x_s)/gamma)
                every k_s steps of the stage, and at its last step: w_i = avg(w)
            x_{s+1} = avg(w)                 # the next stage starts from the average
            eta_{s+1} = eta_s / 2;  T_{s+1} = 2 T_s
            k_{s+1} = 2 k_s (data=iid)  or  sqrt(2) k_s, rounded (data=non-iid)

    Why the two growth rates: the local drift between averages costs about
    eta^2 k sigma^2 with identical data and eta^2 k^2 zeta^2 with different data
    per rank; keeping it proportional to eta when eta halves means doubling k,
    or multiplying it by sqrt(2). The non-iid period is kept as a float and
    rounded each stage (so k1 = 1 grows 1, 1, 2, 3, 4, 6, 8, ...).

    Within a stage it is local SGD (:class:`~.local_sgd.LocalSGD`'s step and
    period test) on the stage's own step count, with period k_s, plus an
    average at the stage's last step.

    The learning rate: :meth:`adjust_lr` multiplies the Trainer's schedule by
    0.5^stage, so it composes with ``--schedule``; the paper's rule is
    ``--schedule constant`` (recommended; a decaying schedule decays twice).

    Options:
        t1: length of the first stage in steps.
        k1: communication period of the first stage in steps.
        data: ``iid`` (period x2 per stage) or ``non-iid`` (x sqrt 2, rounded).
        gamma: > 0 adds the non-convex variant's proximal term
            ``(w_i - x_s)/gamma`` to the gradient (x_s = the stage's starting
            average); 0 = off (plain local SGD within a stage).

    Logs per step: ``stage``, ``period`` (k of this step's stage),
    ``consensus_before_avg`` (the consensus distance just before an average;
    empty on steps without one).
    """

    name = "stl-sgd"
    paper = ("S. Shen, Y. Cheng, J. Liu, L. Xu, STL-SGD: Speeding Up Local SGD with Stagewise Communication "
             "Period, AAAI 2021, arXiv:2006.06377")
    POSITIONAL = ()  # no period option: t1 and k1 set the stages

    @dataclass
    class Options:
        t1: int = field(default=200, metadata={"help": "length of the first stage", "unit": "steps"})
        k1: int = field(default=2, metadata={"help": "communication period of the first stage", "unit": "steps"})
        data: str = field(default="iid", metadata={"help": "iid: period x2 per stage; non-iid: x sqrt(2), rounded",
                                                          "choices": ("iid", "non-iid")})
        gamma: float = field(default=0.0, metadata={"help": "proximal term (w - x_s)/gamma of the non-convex "
                                                            "variant; 0 = off"})

        def validate(self):
            if self.t1 < 1:
                raise ValueError(f"t1 (first stage length) must be >= 1 step, got {self.t1}")
            if self.k1 < 1:
                raise ValueError(f"k1 (first communication period) must be >= 1 step, got {self.k1}")
            if self.k1 > self.t1:
                raise ValueError(f"k1={self.k1} is longer than the first stage t1={self.t1}: "
                                 "choose k1 <= t1")
            if self.data not in ("iid", "non-iid"):
                raise ValueError(f"data must be iid or non-iid, got {self.data!r}")
            if self.gamma < 0:
                raise ValueError(f"gamma must be >= 0 (0 = no proximal term), got {self.gamma}")

    @classmethod
    def step_time(cls, options, profile, P, net, phi=0.0) -> float:
        """Compute every step and one Allreduce of the weights every k1 steps:
        the first stage's period, an upper bound on the communication (later
        stages average less often); nothing overlaps."""
        return profile.compute + net.allreduce_time(profile.grad_bytes, P) / options.k1

    def setup(self) -> None:
        o = self.options
        self.stage, self.stage_start, self.stage_len = 0, 0, o.t1
        self.k_real = float(o.k1)  # the non-iid period grows by sqrt(2): keep it unrounded
        self.anchor = self.flat.weights.copy() if o.gamma > 0 else None

    def period_now(self) -> int:
        """k_s, the communication period of the stage in progress."""
        return max(1, round(self.k_real))

    def averages_after(self, t: int) -> bool:
        """Local SGD's period test on the stage's clock, and the stage's last step."""
        local = t - self.stage_start                           # steps done in this stage
        return super().averages_after(local) or local == self.stage_len

    def averages_momentum(self) -> bool:
        return False  # the weights only

    def adjust_lr(self, lr: float) -> float:
        return lr * 0.5 ** self.stage  # eta_s = eta_1 / 2^s, on top of the schedule

    def start(self, broadcast: bool = True) -> None:
        super().start(broadcast)
        if self.anchor is not None and self.step_count == 0:
            self.anchor[...] = self.flat.weights  # x_0 = the common starting point

    def step_log(self) -> dict:
        return {"stage": self.stage, "period": self.period_now(), "consensus_before_avg": ""}

    def local_gradient(self) -> np.ndarray:
        g, o = super().local_gradient(), self.options
        if o.gamma > 0:  # STL-SGD^nc: minimise F(x) + ||x - x_s||^2 / (2 gamma) in this stage
            g += (self.flat.weights - self.anchor) * np.float32(1.0 / o.gamma)
        return g

    def step(self) -> None:
        o, w = self.options, self.flat.weights
        super().step()                                         # w_i = opt(w_i, g_i); w_i = avg(w) when due
        if self.step_count - self.stage_start == self.stage_len:   # stage over: x_{s+1} = avg(w)
            self.stage += 1
            self.stage_start = self.step_count
            self.stage_len *= 2                                # T doubles (eta halves in adjust_lr)
            self.k_real *= 2.0 if o.data == "iid" else math.sqrt(2.0)
            if self.anchor is not None:
                self.anchor[...] = w

    def state_dict(self) -> dict:
        state = {**super().state_dict(), "stage": self.stage, "stage_start": self.stage_start,
                 "stage_len": self.stage_len, "k_real": self.k_real}
        if self.anchor is not None:
            state["anchor"] = self.anchor.copy()
        return state

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.stage, self.stage_start = int(state["stage"]), int(state["stage_start"])
        self.stage_len, self.k_real = int(state["stage_len"]), float(state["k_real"])
        if self.anchor is not None:
            self.anchor[...] = np.asarray(state["anchor"], np.float32)

    def report(self) -> dict:
        return {"final_stage": self.stage, "final_period": self.period_now()}

    @classmethod
    def default_label(cls, options) -> str:
        return f"{cls.name}:{options.data}"
