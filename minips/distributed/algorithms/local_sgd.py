"""Local SGD (periodic model averaging): every rank steps on its own, and every
H steps the ranks average their weights.

Lin, Stich, Patel & Jaggi, "Don't Use Large Mini-Batches, Use Local SGD",
ICLR 2020 (arXiv:1808.07217; code github.com/epfml/LocalSGD-Code), and
Stich, "Local SGD Converges Fast and Communicates Little", ICLR 2019
(arXiv:1805.09767).

The local step and the averaging are shared with post-local SGD
(:mod:`.post_local_sgd`), aperiodic local SGD (:mod:`.aperiodic_local_sgd`),
STL-SGD (:mod:`.stl_sgd`) and adaptive-batch local SGD (:mod:`.adaptive_batch`),
which subclass :class:`LocalSGD` and change *when* the ranks average
(:meth:`LocalSGD.period_now`, :meth:`LocalSGD.averages_after`) and what a
step does around it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .base import Algorithm

__all__ = ["LocalSGD"]

_LOCAL_SGD_PAPER = ("T. Lin, S. U. Stich, K. K. Patel, M. Jaggi, Don't Use Large Mini-Batches, Use Local SGD, "
                    "ICLR 2020 (arXiv:1808.07217); S. U. Stich, Local SGD Converges Fast and Communicates Little, "
                    "ICLR 2019 (arXiv:1805.09767)")


class LocalSGD(Algorithm):
    """Local SGD: local optimizer steps, the weights averaged every H steps.

    Pseudo-code (Lin et al. 2020, Algorithm 1; rank i, step t = 0, 1, ...)::

        g_i   = gradient of rank i's mini-batch at w_i
        w_i   = opt_i(w_i, g_i)                 # own momentum buffer v_i, no communication
        if (t + 1) mod H == 0:                  # H local steps done
            w_i = (1/P) sum_j w_j               # one Allreduce of the d weights
            [v_i = (1/P) sum_j v_j]             # average-momentum=true: one more Allreduce

    Options (spec ``local-sgd:period=8:average-momentum=true``):
        period: H >= 1 steps between averages (default 8).
        average_momentum: also average the momentum buffers (default false, as
            PyTorch's post-local SGD, which averages the weights only).

    H = 1 is synchronous SGD in exact arithmetic, with or without
    average-momentum: all ranks hold the same w, so the averaged weights are
    ``w - lr * mean_i(v_i)``, and ``mean_i(v_i)`` obeys the same recursion as
    sync's buffer ``V = mu V + mean_i(g_i)`` (the optimizer step is linear in
    v and g; weight decay and Nesterov too, since w is common). Without
    average-momentum the per-rank buffers differ from sync's but their mean
    equals it; with it each rank's buffer is sync's. In float32 both agree
    with sync to summation rounding (tests/test_local_sgd.py).

    Logged per step (trace.csv): ``period`` (the current H) and, on the steps
    that average, ``consensus_before_avg`` = ``(1/P) sum_i ||w_i - mean w||^2``
    just before the average (computed from the allreduced mean: one scalar
    allreduce, timed as the phase ``consensus``). The average is timed as
    ``average``.
    """

    name = "local-sgd"
    family = "model averaging"
    gradient_allreduce_per_step = False  # the weights go every H steps: no per-step overlap efficiency
    paper = _LOCAL_SGD_PAPER
    POSITIONAL = ("period",)

    @dataclass
    class Options:
        period: int = field(default=8, metadata={"help": "H: local steps between weight averages", "unit": "steps"})
        average_momentum: bool = field(default=False, metadata={
            "help": "also average the momentum buffers (one more allreduce of d floats)"})

        def validate(self):
            if self.period < 1:
                raise ValueError(f"period must be >= 1 (H steps between averages; 1 = every step), got {self.period}")

    @classmethod
    def keeps_replicas(cls, options) -> bool:
        return False  # between averages each rank holds its own weights

    @classmethod
    def step_time(cls, options, profile, P, net, phi=0.0) -> float:
        """``T = compute + k * A(d) / H``: compute every step (nothing overlaps,
        so phi does not matter), one blocking allreduce of the weights (as many
        bytes as the gradient) every H steps, k = 2 with average-momentum.
        Ignores the 8-byte consensus scalar."""
        k = 2 if options.average_momentum else 1
        return profile.compute + k * net.allreduce_time(profile.grad_bytes, P) / options.period

    @classmethod
    def default_label(cls, options) -> str:
        return f"{cls.name}:period={options.period}"

    # --- when to average (subclasses change this) -------------------------------------
    def period_now(self) -> int:
        """The communication period in force at this step (logged as ``period``)."""
        return self.options.period

    def averages_after(self, t: int) -> bool:
        """Whether the ranks average after the t-th local step (t = 1, 2, ...):
        every ``period_now()`` steps."""
        return t % self.period_now() == 0

    def averages_momentum(self) -> bool:
        """Whether an average also averages the momentum buffers (the option average-momentum)."""
        return self.options.average_momentum

    # --- the step ---------------------------------------------------------------------
    def step_log(self) -> dict:
        """The step's trace.csv entries, set before the step (``consensus_before_avg`` is added on averages)."""
        return {"period": self.period_now()}

    def local_gradient(self) -> np.ndarray:
        """The gradient this step's local update applies, after :meth:`step_log`: the rank's own, g_i."""
        return self.flat.grads[0]

    def step(self) -> None:
        self.log = self.step_log()
        self.apply_update(self.local_gradient())       # w_i = opt_i(w_i, g_i): a local step
        if self.averages_after(self.step_count + 1):   # H local steps since the last average
            self.log["consensus_before_avg"] = self.average_model()
        self.end_step()

    def average_model(self, distance: bool = True) -> float | None:
        """``w_i = mean_j w_j`` (:meth:`Algorithm.average_model`), and the
        momentum buffers too with average-momentum; returns the consensus
        distance just before."""
        dist = super().average_model(distance)
        v = self.optimizer.buffers[0]                   # None until the first step with momentum
        if self.averages_momentum() and v is not None:
            with self.timer.phase("average"):
                self.comm.allreduce(v)
                self.average(v)
        return dist
