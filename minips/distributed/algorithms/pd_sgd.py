"""PD-SGD: decentralized SGD with multiple local updates (I1 silent local
steps, then I2 gossip steps).

Li, Yang, Wang & Zhang, "Communication-Efficient Local Decentralized SGD
Methods" (first version: "Communication Efficient Decentralized Training with
Multiple Local Updates"), arXiv:1910.09126, 2019.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .gossip_common import GossipAlgorithm, gossip_time, radius_field, seed_field, topology_field, validate_topology

__all__ = ["PDSGD"]


class PDSGD(GossipAlgorithm):
    """PD-SGD: I1 local steps without communication, then I2 gossip steps.

    Pseudo-code (Li et al. 2019; rank i; a cycle is I1 + I2 steps, ``pos`` the
    step's position in it)::

        z_i = opt_i(w_i, g_i(w_i))           # every step: local step, own momentum
        if pos >= I1:  w_i = mix(z)_i         # the I2 gossip (D-PSGD, adapt-then-combine) steps
        else:          w_i = z_i              # the I1 silent local steps

    I1 = 0 is D-PSGD in adapt-then-combine form (``d-psgd:form=atc``); on the
    complete graph with I2 = 1 it is local SGD with period I1 + 1.

    Decay (the paper "periodically shrinks the length of local updates"; its
    exact schedule is unverified): with ``i1-decay=K > 0`` I1 halves (integer
    division) every K steps, down to ``i1-min``; the new I1 takes effect at the
    start of the next cycle.

    Options (spec ``pd-sgd:i1=4:i2=1:topology=ring``): i1 (default 4), i2
    (default 1), i1_decay (steps, 0 = off), i1_min (default 0), topology, seed /
    radius.

    Logged per step: ``i1`` (in force) and ``gossip`` (1 on a gossip step).
    State (checkpointed): the position in the cycle and the I1 of the cycle.
    """

    name = "pd-sgd"
    paper = ("X. Li, W. Yang, S. Wang, Z. Zhang, Communication-Efficient Local Decentralized SGD Methods "
             "(Communication Efficient Decentralized Training with Multiple Local Updates), arXiv:1910.09126 (2019)")
    POSITIONAL = ("i1", "i2")

    @dataclass
    class Options:
        i1: int = field(default=4, metadata={"help": "I1: silent local steps per cycle", "unit": "steps"})
        i2: int = field(default=1, metadata={"help": "I2: gossip steps per cycle", "unit": "steps"})
        i1_decay: int = field(default=0, metadata={"help": "halve I1 every this many steps (0 = never)",
                                                   "unit": "steps"})
        i1_min: int = field(default=0, metadata={"help": "smallest I1 the decay reaches", "unit": "steps"})
        topology: str = topology_field()
        seed: int = seed_field()
        radius: float = radius_field()

        def validate(self):
            validate_topology(self)
            if self.i1 < 0:
                raise ValueError(f"i1 must be >= 0 (silent local steps per cycle; 0 = D-PSGD), got {self.i1}")
            if self.i2 < 1:
                raise ValueError(f"i2 must be >= 1 (gossip steps per cycle), got {self.i2}")
            if self.i1_decay < 0 or not 0 <= self.i1_min <= self.i1:
                raise ValueError(f"i1-decay must be >= 0 and 0 <= i1-min <= i1, got i1-decay={self.i1_decay}, "
                                 f"i1-min={self.i1_min}")

    @classmethod
    def step_time(cls, options, profile, P, net, phi=0.0) -> float:
        """I2 blocking gossip steps (N each, see d-psgd) per cycle of I1 + I2
        steps (with the initial I1; decay only lowers I1)::

            T = compute + I2 N / (I1 + I2)"""
        o = options
        return profile.compute + o.i2 * gossip_time(o, profile.grad_bytes, P, net) / (o.i1 + o.i2)

    @classmethod
    def default_label(cls, options) -> str:
        return f"{cls.name}:i1={options.i1}:i2={options.i2}"

    def setup(self) -> None:
        super().setup()
        self.pos, self.i1_now = 0, self.options.i1

    def i1_at(self, t: int) -> int:
        """I1 after the decay at step ``t``."""
        o = self.options
        return o.i1 if not o.i1_decay else max(o.i1_min, o.i1 >> (t // o.i1_decay))

    def step(self) -> None:
        t = self.step_count
        if self.pos == 0:
            self.i1_now = self.i1_at(t)                 # a new cycle: the decayed I1
        gossip = self.pos >= self.i1_now
        self.log = {"i1": self.i1_now, "gossip": int(gossip)}
        self.apply_update(self.flat.grads[0])           # z_i = opt_i(w_i, g_i)
        if gossip:
            self.gossip()                               # w_i = mix(z)_i
        self.pos = (self.pos + 1) % (self.i1_now + self.options.i2)
        self.end_step()

    def state_dict(self) -> dict:
        return {**super().state_dict(), "pd_pos": self.pos, "pd_i1": self.i1_now}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.pos, self.i1_now = int(state.get("pd_pos", 0)), int(state.get("pd_i1", self.options.i1))
