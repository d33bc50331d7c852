"""GT-PGA: gradient tracking with periodic global averaging.

Feng et al., "Accelerating Gradient Tracking with Periodic Global Averaging",
arXiv:2403.11293, 2024. Only the abstract was read (docs/specifications.md
section 11): the rule is standard gradient tracking (:mod:`.gradient_tracking`)
with Gossip-PGA's switch (Chen, Yuan et al., ICML 2021): every H-th step the
gossip step of both variables is replaced by the exact global average.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .gossip_common import gossip_time
from .gradient_tracking import GradientTracking

__all__ = ["GTPGA"]


class GTPGA(GradientTracking):
    """Gradient tracking whose every H-th mixing step is a global average.

    Pseudo-code (rank i, step t; as :class:`GradientTracking`, with
    ``M_t = avg if (t + 1) % H == 0 else mix``, the same operator for w and y)::

        y_i^t     = M_{t-1}(y^{t-1})_i + g_i^t - g_i^{t-1}     (y_i^0 = g_i^0)
        w_i^{t+1} = M_t(w^t)_i - lr y_i^t                       form=cta: [w, y] in one
                                                                message / one Allreduce of 2d
    On a global step every rank gets the same w and the same next tracker base
    ``avg(y^t)``, so the heterogeneity bias the gossip steps accumulate is reset
    (the paper's point: choose H to make up for a small spectral gap).
    ``mean(y) == mean(g)`` still holds at every step (tested).

    Options (spec ``gt-pga:period=6:topology=ring``): ``period`` H (>= 1;
    H = 1 averages globally every step), plus gradient-tracking's. Logged: as
    gradient-tracking; ``global_avg`` is 1 on the averaging steps (phase ``average``).
    """

    name = "gt-pga"
    paper = ("Feng et al., Accelerating Gradient Tracking with Periodic Global Averaging, arXiv:2403.11293, 2024 "
             "(abstract only; rule = DIGing gradient tracking + Gossip-PGA's periodic global average; "
             "docs/specifications.md section 11)")
    POSITIONAL = ("period",)

    @dataclass
    class Options(GradientTracking.Options):
        period: int = field(default=6, metadata={"help": "H: every H-th step averages globally", "unit": "steps"})

        def validate(self):
            super().validate()
            if self.period < 1:
                raise ValueError(f"period must be >= 1 (every H-th step averages globally), got {self.period}")

    @classmethod
    def step_time(cls, options, profile, P, net, phi=0.0) -> float:
        """``compute + (1 - 1/H) E + (1/H) A``: a gossip exchange E (as
        gradient-tracking) on H - 1 of every H steps, an Allreduce A of the
        same bytes (2d floats, cta; 2 x d, atc) on the H-th."""
        d, H = profile.grad_bytes, options.period
        if options.form == "cta":
            E, A = gossip_time(options, 2 * d, P, net), net.allreduce_time(2 * d, P)
        else:
            E, A = 2 * gossip_time(options, d, P, net), 2 * net.allreduce_time(d, P)
        return profile.compute + (1 - 1 / H) * E + A / H

    @classmethod
    def default_label(cls, options) -> str:
        return f"{cls.name}:period={options.period}"

    def global_now(self, t: int) -> bool:
        return (t + 1) % self.options.period == 0
