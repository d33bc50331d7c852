"""Gossip-PGA: gossip SGD with a global average every H-th step.

Chen, Yuan, Zhang, Pan, Xu & Yin, "Accelerating Gossip SGD with Periodic
Global Averaging", ICML 2021 (arXiv:2105.09080). The adaptive-period variant,
Gossip-AGA, subclasses this one (:mod:`.gossip_aga`).
"""
from __future__ import annotations

from dataclasses import dataclass, field


from .gossip_common import GossipAlgorithm, gossip_time, radius_field, seed_field, topology_field, validate_topology

__all__ = ["GossipPGA", "PGA_PAPER"]

#: the paper of Gossip-PGA, which Gossip-AGA (gossip_aga.py) extends
PGA_PAPER = ("Y. Chen, K. Yuan, Y. Zhang, P. Pan, Y. Xu, W. Yin, Accelerating Gossip SGD with Periodic Global "
             "Averaging, ICML 2021 (arXiv:2105.09080)")


class GossipPGA(GossipAlgorithm):
    """Gossip-PGA: adapt-then-combine gossip SGD; every H-th step an allreduce instead.

    Pseudo-code (Chen et al. 2021, Algorithm 1, in our notation; rank i, step t)::

        z_i = opt_i(w_i, g_i(w_i))                # local step, own momentum buffer
        if (t + 1) mod H == 0:  w_i = avg(z)       # global average: one Allreduce of d floats
        else:                   w_i = mix(z)_i     # one gossip step with W (degree x d floats)

    The global step replaces the gossip step of that iteration (it is not an
    extra round). H = 1 is synchronous SGD with model averaging (equal to sync
    SGD: see d-psgd's atc form on the complete graph); H larger than the run
    is plain gossip SGD (d-psgd:form=atc). Right after a global step every rank
    holds the same weights (consensus distance 0); momentum buffers stay on
    their rank and are never averaged.

    Options (spec ``gossip-pga:period=6:topology=ring``, or ``gossip-pga:6``):
    period H >= 1 (default 6, the paper's ImageNet setting), topology (default
    ring), seed / radius for random-geometric.

    Logged per step (trace.csv): ``period`` (H in force) and ``global`` (1 on a
    global-average step, else 0). Phases: mix (gossip) and average (allreduce).
    """

    name = "gossip-pga"
    paper = PGA_PAPER
    POSITIONAL = ("period",)

    @dataclass
    class Options:
        period: int = field(default=6, metadata={"help": "H: every H-th step averages globally "
                                                         "(allreduce) instead of gossiping", "unit": "steps"})
        topology: str = topology_field()
        seed: int = seed_field()
        radius: float = radius_field()

        def validate(self):
            validate_topology(self)
            if self.period < 1:
                raise ValueError(f"period must be >= 1 (H: steps per global average), got {self.period}")

    @classmethod
    def cost_period(cls, options) -> int:
        """The H of the cost model (the period)."""
        return options.period

    @classmethod
    def step_time(cls, options, profile, P, net, phi=0.0) -> float:
        """Per window of H steps (:meth:`cost_period`): H - 1 blocking gossip
        steps (N each, see d-psgd) and one blocking allreduce of the weights (A)::

            T = compute + ((H - 1) N + A) / H"""
        H = cls.cost_period(options)
        N = gossip_time(options, profile.grad_bytes, P, net)
        return profile.compute + ((H - 1) * N + net.allreduce_time(profile.grad_bytes, P)) / H

    @classmethod
    def default_label(cls, options) -> str:
        return f"{cls.name}:period={options.period}"

    def is_global(self, t: int) -> bool:
        """Whether step ``t`` (0-based) averages globally."""
        return (t + 1) % self.options.period == 0

    def period_now(self) -> int:
        """The period H in force (logged as ``period``)."""
        return self.options.period

    def step(self) -> None:
        glob = self.is_global(self.step_count)
        self.log = {"global": int(glob)}
        self.apply_update(self.flat.grads[0])           # z_i = opt_i(w_i, g_i)
        if glob:
            self.global_average()                       # w_i = avg(z)
        else:
            self.gossip()                               # w_i = mix(z)_i
        self.log["period"] = self.period_now()
        self.end_step()

    def global_average(self) -> None:
        """``w_i = (1/P) sum_j w_j``: one allreduce (phase ``average``)."""
        self.average_model(distance=False)
