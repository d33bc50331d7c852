"""Gradient tracking (DIGing / NEXT): gossip SGD in which every rank also
gossips a tracker ``y_i`` of the average gradient and steps along it, so that
non-IID ranks are not pulled towards their own optimum.

Nedic, Olshevsky & Shi, "Achieving Geometric Convergence for Distributed
Optimization over Time-Varying Graphs", SIAM J. Optim. 27(4), 2017 (DIGing);
Di Lorenzo & Scutari, "NEXT: In-Network Nonconvex Optimization", IEEE Trans.
Signal Inf. Process. Netw. 2(2), 2016. GT-PGA (:mod:`.gt_pga`) subclasses it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .gossip_common import GossipAlgorithm, GossipOptions, gossip_time

__all__ = ["GradientTracking"]


class GradientTracking(GossipAlgorithm):
    """Gradient tracking: ``w`` gossips and steps along ``y``, ``y`` tracks mean(g).

    Pseudo-code (DIGing, Nedic et al. 2017, combine-then-adapt; rank i, step t;
    ``M`` = the gossip step ``mix(v)_i = sum_j W_ij v_j``)::

        g_i^t = gradient of rank i's mini-batch at w_i^t
        y_i^t = g_i^0                          if t == 0
              = M(y^{t-1})_i + g_i^t - g_i^{t-1}  otherwise   # the tracker
        form=cta (default; one exchange of [w, y], 2d floats):
            w_i^{t+1} = M(w^t)_i - lr y_i^t      (M(y^t)_i kept for step t+1)
        form=atc (adapt-then-combine; two exchanges of d floats):
            y_i^t     = M(y^{t-1} + g^t - g^{t-1})_i   (t > 0)
            w_i^{t+1} = M(w^t - lr y^t)_i

    M is doubly stochastic, so ``mean_i(y_i^t) == mean_i(g_i^t)`` at every step
    (tested). With the complete graph, ``form=atc`` is synchronous SGD (every
    y_i^t is then the average gradient); ``form=cta`` is not (the ranks'
    gradients are taken at different points after step 0).

    The step ``w - lr y`` is the optimizer's step on the direction y
    (:meth:`apply_update`): with ``--momentum 0`` it is the papers' rule; with
    momentum (the Trainer's default 0.9, Nesterov) it is heavy-ball/Nesterov on
    the tracked direction, each rank with its own buffer, as
    docs/specifications.md section 11 allows ("momentum only on the tracked
    direction y"): an engineering extension the papers do not analyse. Weight
    decay is added to y by the optimizer and is not tracked.

    Options (spec ``gradient-tracking:topology=ring:form=cta``): ``topology``
    (and ``seed``/``radius`` for random-geometric), ``form``.

    Logged per step (trace.csv): ``tracker_gap`` = ``||y_i - g_i|| / ||g_i||``
    on rank 0 (how much the tracker corrects the own gradient), ``global_avg``
    (1 on steps that average globally: GT-PGA). Phases: ``track``, ``mix``,
    ``average``.
    """

    name = "gradient-tracking"
    paper = ("A. Nedic, A. Olshevsky, W. Shi, Achieving Geometric Convergence for Distributed Optimization over "
             "Time-Varying Graphs, SIAM J. Optim. 27(4), 2017 (DIGing); P. Di Lorenzo, G. Scutari, NEXT: "
             "In-Network Nonconvex Optimization, IEEE Trans. Signal Inf. Process. Netw. 2(2), 2016")

    @dataclass
    class Options(GossipOptions):
        form: str = field(default="cta", metadata={
            "help": "cta: w = mix(w) - lr y, one exchange of [w, y]; atc: w = mix(w - lr y), two exchanges",
            "choices": ("cta", "atc")})

    graph_clock = "step"       # both exchanges of a step (atc) use the step's graph, global steps included
    mix_order = "self-first"

    @classmethod
    def step_time(cls, options, profile, P, net, phi=0.0) -> float:
        """``compute + E``, E = one neighbour exchange of 2d floats (cta) or two
        of d floats (atc): ``degree (alpha + n beta)``, independent of P."""
        d = profile.grad_bytes
        comm = gossip_time(options, 2 * d, P, net) if options.form == "cta" else 2 * gossip_time(options, d, P, net)
        return profile.compute + comm

    @classmethod
    def default_label(cls, options) -> str:
        return f"{cls.name}:topology={options.topology}"

    def setup(self) -> None:
        super().setup()
        n = self.flat.numel
        self.wy = np.zeros((2, n), np.float32)  # [w, y]: the message of form=cta
        self.y = self.wy[1]                     # y_i^t, this step's tracker
        self.base = np.zeros(n, np.float32)     # cta: M(y^{t-1})_i; atc: y_i^{t-1}
        self.g_old = np.zeros(n, np.float32)    # g_i^{t-1}

    # --- the communication of one step (GT-PGA replaces it by a global average) -----------
    def global_now(self, t: int) -> bool:
        """Whether step t averages globally instead of gossiping (never, here)."""
        return False

    def mix(self, v: np.ndarray, t: int) -> np.ndarray:
        """``M(v)_i``: a gossip step, or on global steps the average (an Allreduce)."""
        if self.global_now(t):
            with self.timer.phase("average"):
                out = v.copy()
                self.comm.allreduce(out)
                return self.average(out)
        with self.timer.phase("mix"):
            return self.mixer.mixed(v, t)

    # --- the step ---------------------------------------------------------------------
    def step(self) -> None:
        t, g, w, y = self.step_count, self.flat.grads[0], self.flat.weights, self.y
        with self.timer.phase("track"):
            if t == 0:
                y[...] = g                              # y^0 = g^0
            else:
                y[...] = self.base + g - self.g_old     # add the gradient's change to the (mixed) tracker
            self.g_old[...] = g
        if self.options.form == "cta":
            self.wy[0] = w
            mixed = self.mix(self.wy, t)                # [M(w^t), M(y^t)]: one exchange of 2d floats
            w[...] = mixed[0]
            self.base[...] = mixed[1]                   # for y^{t+1}
            self.apply_update(y)                        # w^{t+1} = M(w^t) - lr y^t
        else:
            if t > 0:
                y[...] = self.mix(y, t)                 # y^t = M(y^{t-1} + g^t - g^{t-1})
            self.base[...] = y
            self.apply_update(y)                        # w^t - lr y^t ...
            w[...] = self.mix(w, t)                     # ... then combine
        self.log = {"tracker_gap": float(np.linalg.norm(y - g) / max(np.linalg.norm(g), 1e-30)),
                    "global_avg": int(self.global_now(t))}
        self.end_step()

    # --- state ------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """The tracker's base (M(y^{t-1}) or y^{t-1}) and the last gradient."""
        return {**super().state_dict(), "tracker_base": self.base.copy(), "grad_prev": self.g_old.copy()}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        if "tracker_base" in state:
            self.base[...] = np.asarray(state["tracker_base"])
            self.g_old[...] = np.asarray(state["grad_prev"])
