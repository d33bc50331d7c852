"""Accelerated gossip gradient method, reconstructed as the distributed Nesterov
gradient method D-NG.

RECONSTRUCTION: no text of "An Accelerated Gossip-Based Distributed Gradient
Method" was found (docs/specifications.md section 12). The rule implemented is
D-NG of Jakovetic, Xavier & Moura, "Fast Distributed Gradient Methods", IEEE
Trans. Automatic Control 59(5), 2014 (random-network version: "Distributed
Nesterov-like gradient methods for random networks", IEEE Trans. Signal
Process. 62(4), 2014).
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from .gossip_common import GossipAlgorithm, GossipOptions, gossip_time

__all__ = ["DNG"]


class DNG(GossipAlgorithm):
    """D-NG (reconstruction of the accelerated gossip gradient method): gossip the
    extrapolated point, take the gradient there, momentum on the consensus iterate.

    Pseudo-code (Jakovetic, Xavier, Moura 2014; rank i, k = 1, 2, ...;
    x_i^0 = y_i^0 = w0)::

        g_i   = gradient of rank i's mini-batch at y_i^{k-1}     # compute_point()
        x_i^k = sum_j W_ij y_j^{k-1} - alpha_{k-1} g_i           # one exchange of y (d floats)
        y_i^k = x_i^k + beta_{k-1} (x_i^k - x_i^{k-1})

    Step sizes: ``rule=paper``: ``alpha_k = c / (k + 1)``, ``beta_k = k / (k + 3)``
    (the paper's; for convex L-smooth costs O(log k / k)). ``rule=constant``:
    ``alpha_k = c``, ``beta_k = momentum`` (our engineering choice
    for deep nets: Nesterov-momentum gossip, not the paper). ``c`` = 0 (default)
    uses the step's learning rate (``--lr`` with its schedule) as c.

    This rule REPLACES the optimizer's step: the Trainer's ``--momentum``,
    ``--nesterov`` and ``--weight-decay`` are not used (the optimizer's buffer
    stays empty); ``--clip-norm`` is (the gradient g is clipped first). With
    P = 1, ``rule=constant`` and a constant step size (``c`` > 0, or ``c`` = 0
    with ``--schedule constant``) it is Nesterov SGD
    (``SGD(lr=c, momentum=beta, nesterov=True)``, whose weights are y; tested).
    With a schedule (the default is cosine) it is not: D-NG scales each
    gradient by its own step's alpha and carries that in ``x^k - x^{k-1}``
    (the step size inside the velocity, as in Sutskever et al. 2013), where
    SGD's buffer sums raw gradients and scales them all by the current
    learning rate; one rank then follows the step-size-inside form (tested).

    The weights (``flat.weights``) hold the iterate x (evaluated, averaged,
    checkpointed); y is swapped in by :meth:`compute_point` for forward and
    backward and kept in the algorithm state.

    Options (spec ``dng:rule=constant:momentum=0.9:topology=ring``): ``rule``,
    ``c``, ``momentum``, ``topology`` (and ``seed``/``radius``). Logged per step:
    ``alpha``, ``beta``. Phases: ``mix``, ``update``.
    """

    name = "dng"
    paper = ("RECONSTRUCTION of 'An Accelerated Gossip-Based Distributed Gradient Method' (not found) as D-NG: "
             "D. Jakovetic, J. Xavier, J. M. F. Moura, Fast Distributed Gradient Methods, IEEE Trans. Automatic "
             "Control 59(5), 2014; docs/specifications.md section 12")

    @dataclass
    class Options(GossipOptions):
        rule: str = field(default="paper", metadata={
            "help": "paper: alpha_k = c/(k+1), beta_k = k/(k+3); constant: alpha = c, beta = momentum",
            "choices": ("paper", "constant")})
        c: float = field(default=0.0, metadata={"help": "step-size constant c (0 = the step's learning rate)"})
        momentum: float = field(default=0.9, metadata={"help": "beta for rule=constant"})

        def validate(self):
            super().validate()
            if self.c < 0:
                raise ValueError(f"c must be >= 0 (0 = use the learning rate), got {self.c}")
            if not 0 <= self.momentum < 1:
                raise ValueError(f"momentum must be in [0, 1) (beta of rule=constant), got {self.momentum}")

    graph_clock = "step"       # one mix per step: the step count is the round count
    mix_order = "self-first"

    @classmethod
    def step_time(cls, options, profile, P, net, phi=0.0) -> float:
        """``compute + E``: one neighbour exchange of y (d floats) per step,
        ``degree (alpha + n beta)``, independent of P."""
        return profile.compute + gossip_time(options, profile.grad_bytes, P, net)

    @classmethod
    def default_label(cls, options) -> str:
        return f"{cls.name}:rule={options.rule}"

    def setup(self) -> None:
        super().setup()
        self.y = None  # the extrapolated point; w0 (after start's broadcast) until the first step

    def report(self) -> dict:
        return {**super().report(), "optimizer": "replaced by D-NG's step (reconstruction)"}

    def coefficients(self, k: int) -> tuple[float, float]:
        """(alpha_k, beta_k) of the rule, k = 0, 1, ..."""
        c = self.options.c or self.optimizer.lr
        if self.options.rule == "paper":
            return c / (k + 1), k / (k + 3)
        return c, self.options.momentum

    @contextmanager
    def compute_point(self):
        """The gradient is taken at y (the extrapolated point); x is put back after."""
        if self.y is None:
            self.y = self.flat.weights.copy()
        x = self.flat.weights.copy()
        self.flat.weights[...] = self.y
        try:
            yield
        finally:
            self.flat.weights[...] = x

    def step(self) -> None:
        k = self.step_count                                 # this step computes x^{k+1}, y^{k+1}
        alpha, beta = self.coefficients(k)
        x, g = self.flat.weights, self.optimizer.clip(self.flat.grads[0])  # --clip-norm, as in the optimizer
        with self.timer.phase("mix"):
            my = self.mixer.mixed(self.y, k)                # sum_j W_ij y_j
        with self.timer.phase("update"):
            x_new = my - np.float32(alpha) * g              # gradient step from the mixed extrapolated point
            self.y[...] = x_new + np.float32(beta) * (x_new - x)  # momentum on the consensus iterate
            x[...] = x_new
        self.log = {"alpha": alpha, "beta": beta}
        self.end_step()

    def state_dict(self) -> dict:
        """The extrapolated point y (x is the weights)."""
        return {**super().state_dict(), "y": [] if self.y is None else [self.y.copy()]}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        ys = state.get("y", [])
        self.y = np.asarray(ys[0], np.float32).copy() if len(ys) else None
