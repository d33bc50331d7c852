"""Local SGD whose per-rank batch grows by a norm test at each averaging point.

Lau, Li, Xu, Liu, Kolar, "Communication-Efficient Adaptive Batch Size
Strategies for Distributed Local Gradient Methods", arXiv:2406.13936 (2024).
The test follows docs/specifications.md section 5 (the norm test of Byrd, Chin,
Nocedal, Wu 2012, applied to the P local gradients at a synchronisation point).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .local_sgd import LocalSGD

__all__ = ["AdaptiveBatchLocalSGD", "norm_test_batch"]

LR_RULES = ("constant", "linear", "sqrt")


def norm_test_batch(sq_dev_sum: float, gbar_sq: float, b: int, P: int, theta: float) -> int:
    """The per-rank batch the norm test asks for.

    ``V = b/(P-1) * sum_i ||g_i - gbar||^2`` estimates the per-sample gradient
    variance (each g_i is the mean of b samples); the average over P*b samples
    has variance V/(P b), and the test wants it at most ``theta^2 ||gbar||^2``::

        b_test = ceil(V / (P theta^2 ||gbar||^2))

    Args:
        sq_dev_sum: ``sum_i ||g_i - gbar||^2`` over the P ranks.
        gbar_sq: ``||gbar||^2``.
        b: the per-rank batch the g_i were measured on.
        P: ranks (>= 2; with one rank there is no variance estimate: returns b).
        theta: test strictness (> 0; smaller asks for bigger batches).
    """
    if P < 2 or gbar_sq <= 0.0:
        return b
    V = b / (P - 1) * sq_dev_sum
    return math.ceil(V / (P * theta ** 2 * gbar_sq))


class AdaptiveBatchLocalSGD(LocalSGD):
    """Local SGD with adaptive per-rank batch sizes (norm test at each averaging point).

    Pseudo-code (b0 = ``--batch-size``; a batch of b = m*b0 samples runs as
    m loader batches whose gradients accumulate: Algorithm.batches_per_step)::

        m = 1
        for round r = 0, 1, ...:                # H steps per round
            # step 1 of the round: the weights are common (start, or just averaged)
            g_i = gradient of this rank's batch of m*b0 samples at w
            gbar = avg(g)                                     # Allreduce(d)
            S = sum_i ||g_i - gbar||^2                        # Allreduce(1 scalar)
            b_test = ceil(b/(P-1) * S / (P theta^2 ||gbar||^2))
            m = min(m_max, max(m, ceil(b_test / b0)))         # never shrinks; next step on
            w_i = opt(w_i, g_i)                               # the round's first local step
            steps 2..H of the round: w_i = opt(w_i, g_i)
            w_i = avg(w)                                      # Allreduce(d)

    It is local SGD (:class:`~.local_sgd.LocalSGD`'s step, period test and
    average) with the norm test before each round's first update. The batch
    only grows, in multiples of b0, up to ``max-batch`` (rounded down to a
    multiple of b0). Every rank computes m from allreduced numbers,
    so all agree. With one rank there is no variance estimate: the batch stays
    b0 (and the algorithm is plain SGD).

    Learning rate (option ``lr-rule``): ``constant`` (default; the schedule's
    lr whatever the batch, as in the norm-test literature: a growing batch acts
    like a decaying step), ``linear`` (lr * b/b0, Goyal et al.'s scaling) or
    ``sqrt`` (lr * sqrt(b/b0)). The paper's own lr rule was not verified.

    Options:
        period: H, local steps between weight averages.
        theta: norm-test strictness (> 0); smaller grows the batch sooner.
        max_batch: largest per-rank batch in samples (0 = 16 * b0).
        lr_rule: constant | linear | sqrt.

    Logs per step: ``batch`` (samples per rank in this step), ``period``,
    ``b_test`` (the test's batch, on test steps), ``consensus_before_avg``.
    """

    name = "adaptive-batch"
    paper = ("T. T.-K. Lau, W. Li, C. Xu, H. Liu, M. Kolar, Communication-Efficient Adaptive Batch Size "
             "Strategies for Distributed Local Gradient Methods, arXiv:2406.13936 (2024)")
    POSITIONAL = ()

    @dataclass
    class Options:
        period: int = field(default=4, metadata={"help": "local steps between weight averages (H)",
                                                 "unit": "steps"})
        theta: float = field(default=0.9, metadata={"help": "norm-test strictness; smaller grows the batch "
                                                            "sooner"})
        max_batch: int = field(default=0, metadata={"help": "largest per-rank batch (0 = 16 x --batch-size)",
                                                    "unit": "samples"})
        lr_rule: str = field(default="constant", metadata={"help": "constant | linear (lr*b/b0) | sqrt",
                                                                 "choices": ("constant", "linear", "sqrt")})

        def validate(self):
            if self.period < 1:
                raise ValueError(f"period (H) must be >= 1 step, got {self.period}")
            if not self.theta > 0:
                raise ValueError(f"theta must be > 0 (e.g. 0.9), got {self.theta}")
            if self.max_batch < 0:
                raise ValueError(f"max-batch must be >= 0 samples (0 = 16 x --batch-size), got {self.max_batch}")
            if self.lr_rule not in LR_RULES:
                raise ValueError(f"lr-rule must be one of {', '.join(LR_RULES)}, got {self.lr_rule!r}")

    @classmethod
    def step_time(cls, options, profile, P, net, phi=0.0) -> float:
        """Per round of H steps: two Allreduces of d floats (the test's
        gradient mean and the weight average; the scalar is ignored); compute
        at the base batch (the batch grows with training: compute per step
        grows with it, steps per epoch shrink by the same factor)."""
        return profile.compute + 2 * net.allreduce_time(profile.grad_bytes, P) / options.period

    @classmethod
    def default_label(cls, options) -> str:
        return cls.name

    def setup(self) -> None:
        self.m = 1            # loader batches per step: the batch is m * b0
        self.b0 = 0           # --batch-size, from batch_size() (0: not known yet)
        self.gbar = np.zeros_like(self.flat.weights)

    def batch_size(self, base: int) -> int:
        self.b0 = base  # the loader batch stays b0; bigger batches are several of them
        return base

    def batches_per_step(self) -> int:
        return self.m

    @property
    def m_max(self) -> int:
        if not self.b0:
            return 1
        return max(1, (self.options.max_batch or 16 * self.b0) // self.b0)

    def adjust_lr(self, lr: float) -> float:
        rule = self.options.lr_rule
        return lr if rule == "constant" else lr * (self.m if rule == "linear" else math.sqrt(self.m))

    def averages_momentum(self) -> bool:
        return False  # the weights only

    def step_log(self) -> dict:
        return {"batch": self.m * self.b0, "period": self.period_now(), "b_test": "", "consensus_before_avg": ""}

    def local_gradient(self) -> np.ndarray:
        g = super().local_gradient()
        if self.averages_after(self.step_count) and self.comm.size > 1:   # a round's first step
            self.norm_test(g)                                  # at the common weights (m for the next steps)
        return g

    def norm_test(self, g: np.ndarray) -> None:
        """Grow ``m`` by the norm test on the P gradients ``g`` (one Allreduce
        of d floats and one scalar; every rank gets the same m)."""
        P = self.comm.size
        with self.timer.phase("norm_test"):
            gbar = self.gbar
            gbar[...] = g
            self.comm.allreduce(gbar)
            self.average(gbar)
            dev = float(np.sum((g.astype(np.float64) - gbar) ** 2))
            sq_dev_sum = self.comm.allreduce_scalar(dev)
        gbar_sq = float(np.dot(gbar.astype(np.float64), gbar))  # identical on every rank
        b_test = norm_test_batch(sq_dev_sum, gbar_sq, self.m * self.b0, P, self.options.theta)
        self.log["b_test"] = b_test
        self.m = min(self.m_max, max(self.m, math.ceil(b_test / self.b0))) if self.b0 else self.m

    def state_dict(self) -> dict:
        return {**super().state_dict(), "m": self.m}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.m = int(state.get("m", 1))

    def report(self) -> dict:
        return {"final_batch_per_rank": self.m * self.b0}
