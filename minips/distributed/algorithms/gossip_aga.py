"""Gossip-AGA: Gossip-PGA whose averaging period grows as the training loss falls.

Chen, Yuan, Zhang, Pan, Xu & Yin, "Accelerating Gossip SGD with Periodic
Global Averaging", ICML 2021 (arXiv:2105.09080), the adaptive variant. The
paper's adaptation formula could not be retrieved: the rule below is a
RECONSTRUCTION (our stand-in, docs/specifications.md section 6).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .gossip_common import radius_field, seed_field, topology_field, validate_topology
from .gossip_pga import PGA_PAPER, GossipPGA

__all__ = ["GossipAGA"]


class GossipAGA(GossipPGA):
    """Gossip-AGA (reconstruction): Gossip-PGA with ``H = ceil(H0 (L0 / L)^power)``.

    Pseudo-code (rank i, step t; the step rule is Gossip-PGA's)::

        z_i = opt_i(w_i, g_i(w_i))
        if t == next_global:                        # H steps since the last global average
            w_i, L = avg(z), avg(running loss)      # one Allreduce of d + 1 floats
            if L0 is unset: L0 = L                  # the loss over the first period
            H = clip(ceil(H0 (L0 / L)^power), H0, H_max)
            next_global = t + H
        else:
            w_i = mix(z)_i

    ``running loss`` is this rank's mean training loss (``ctx.loss``) over the
    steps since the previous global average; it rides in the weight allreduce
    as one extra float, so the adaptation costs no extra message. The period
    starts at H0 (the paper's ImageNet run: 4) and grows as the loss falls
    (the paper reports about 9% global steps over that run; ``report()``
    gives this run's fraction). This formula is our stand-in for
    the paper's, which was not retrievable: a reconstruction.

    Options (spec ``gossip-aga:h0=4:h-max=32:power=0.5``): h0 (initial and
    smallest period, default 4), h_max (largest, default 32), power (exponent
    of the loss ratio, default 0.5), topology, seed / radius.

    Logged per step: ``period`` (H in force) and ``global``; on global steps
    also ``aga_loss`` (the averaged running loss L). State (checkpointed): H,
    next_global, L0, the running loss sum and count, the number of global steps.
    """

    name = "gossip-aga"
    paper = PGA_PAPER + ("; adaptive period: reconstruction (the paper's formula was not retrievable), "
                         "docs/specifications.md section 6")
    POSITIONAL = ("h0",)

    @dataclass
    class Options:
        h0: int = field(default=4, metadata={"help": "initial (and smallest) period H0", "unit": "steps"})
        h_max: int = field(default=32, metadata={"help": "largest period", "unit": "steps"})
        power: float = field(default=0.5, metadata={"help": "H = ceil(H0 (L0 / L)^power)"})
        topology: str = topology_field()
        seed: int = seed_field()
        radius: float = radius_field()

        def validate(self):
            validate_topology(self)
            if self.h0 < 1:
                raise ValueError(f"h0 must be >= 1 (the initial period in steps), got {self.h0}")
            if self.h_max < self.h0:
                raise ValueError(f"h-max must be >= h0 = {self.h0}, got {self.h_max}")
            if not (math.isfinite(self.power) and self.power >= 0):
                raise ValueError(f"power must be a finite number >= 0 (0 = a fixed period h0), got {self.power}")

    @classmethod
    def cost_period(cls, options) -> int:
        """Gossip-PGA's model (:meth:`GossipPGA.step_time`) at H = h0: an upper
        bound, since H only grows from h0 (the loss-driven H is not known
        before the run)::

            T = compute + ((h0 - 1) N + A) / h0"""
        return options.h0

    @classmethod
    def default_label(cls, options) -> str:
        return f"{cls.name}:h0={options.h0}"

    def setup(self) -> None:
        super().setup()
        self._mean = np.empty(self.flat.weights.size + 1, np.float32)  # weights + the loss sum
        self.H, self.next_global, self.L0 = self.options.h0, self.options.h0 - 1, float("nan")
        self.loss_sum, self.loss_count, self.globals = 0.0, 0, 0

    def is_global(self, t: int) -> bool:
        return t == self.next_global

    def step(self) -> None:
        if math.isfinite(self.ctx.loss):
            self.loss_sum, self.loss_count = self.loss_sum + self.ctx.loss, self.loss_count + 1
        super().step()                                  # opt, then mix or global_average

    def period_now(self) -> int:
        return self.H

    def global_average(self) -> None:
        """Average the weights and the running loss in one allreduce, then adapt H."""
        w, buf = self.flat.weights, self._mean
        with self.timer.phase("average"):
            buf[:-1] = w
            buf[-1] = self.loss_sum / max(1, self.loss_count)
            self.comm.allreduce(buf)
            self.average(buf)
            w[...] = buf[:-1]
        L = float(buf[-1])
        self.globals += 1
        self.log["aga_loss"] = L
        if self.loss_count and L > 0:
            if not math.isfinite(self.L0):
                self.L0 = L
            self.H = int(min(self.options.h_max, max(self.options.h0,
                                                     math.ceil(self.options.h0 * (self.L0 / L) ** self.options.power))))
        self.next_global = self.step_count + self.H
        self.loss_sum, self.loss_count = 0.0, 0

    def report(self) -> dict:
        return {**super().report(), "aga_period": self.H, "aga_global_steps": self.globals,
                "aga_global_fraction": self.globals / max(1, self.step_count)}

    def state_dict(self) -> dict:
        return {**super().state_dict(), "aga_H": self.H, "aga_next_global": self.next_global, "aga_L0": self.L0,
                "aga_loss_sum": self.loss_sum, "aga_loss_count": self.loss_count, "aga_globals": self.globals}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        if "aga_H" in state:
            self.H, self.next_global = int(state["aga_H"]), int(state["aga_next_global"])
            self.L0, self.loss_sum = float(state["aga_L0"]), float(state["aga_loss_sum"])
            self.loss_count, self.globals = int(state["aga_loss_count"]), int(state["aga_globals"])
