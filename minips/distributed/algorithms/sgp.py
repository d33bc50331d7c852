"""Stochastic Gradient Push (SGP): push-sum gossip on directed, time-varying
graphs, with the gradient taken at the de-biased model ``z_i = x_i / omega_i``.

Papers: M. Assran, N. Loizou, N. Ballas, M. Rabbat, "Stochastic Gradient Push
for Distributed Deep Learning", ICML 2019 (arXiv:1811.10792; code
github.com/facebookresearch/stochastic_gradient_push); push-sum from
D. Kempe, A. Dobra, J. Gehrke, "Gossip-Based Computation of Aggregate
Information", FOCS 2003. docs/specifications.md section 10 uses this pair as the
reconstruction of "Gossip-Based Averaging, Estimation and Optimization"
(paper not found); SGP itself is implemented from its Algorithm 1.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from ..topology import TOPOLOGIES
from .gossip_common import (GossipAlgorithm, exchange_degree, radius_field, seed_field, topology_field,
                            validate_topology)

__all__ = ["SGP"]

TOPOLOGY_CHOICES = ("auto", *TOPOLOGIES)


class SGP(GossipAlgorithm):
    """Stochastic Gradient Push: push-sum mixing of (x_i, omega_i), gradients at z_i = x_i / omega_i.

    Pseudo-code (Assran et al. 2019, Algorithm 1; rank i, step k = 0, 1, ...;
    x_i = z_i = w_0, omega_i = 1 at the start)::

        g_i = gradient of rank i's mini-batch at z_i
        x_i = opt_i(x_i, g_i)                         # the optimizer acts on the numerator x
        send (p_ji x_i, p_ji omega_i) to every out-neighbour j; keep (p_ii x_i, p_ii omega_i)
        x_i     = sum_j p_ij x_j                      # what was kept + what arrived
        omega_i = sum_j p_ij omega_j
        z_i     = x_i / omega_i

    Mixing weights (push-sum's uniform split, Kempe et al.; SGP's code does the
    same): rank i keeps ``1/(d_i + 1)`` and sends ``1/(d_i + 1)`` to each of its
    d_i out-neighbours, so the matrix is column stochastic and
    ``sum_i x_i`` and ``sum_i omega_i = P`` are preserved by every mixing step.
    On regular graphs (one-peer exponential, directed ring, ring, torus,
    complete) it is also row stochastic and omega_i stays 1; on an irregular
    graph (random-geometric) omega_i varies and the division by omega_i
    removes the bias towards well-connected ranks. omega_i travels as one extra
    float32 appended to the numerator (d + 1 floats per message).

    **The model of a rank** is z_i. ``self.flat.weights`` holds z_i between
    steps (so the forward/backward, the evaluation of the averaged model, the
    Trainer's rank-0 evaluation and the consensus distance all see z), and the
    numerator x_i is a separate buffer that the optimizer updates (state_dict
    carries it, so a resume is bitwise). The averaged model evaluated is
    ``(1/P) sum_i z_i``.

    Options (spec ``sgp:topology=one-peer-exponential``):
        topology: ``auto`` (default: one-peer-exponential when P is a power of
            two, else directed-ring) or a name of minips.distributed.topology
            (time-varying one-peer-exponential: one Sendrecv; a static graph:
            one neighbour allgather).
        seed, radius: of the random-geometric graph.

    With P = 1 it is plain SGD (omega stays 1, z = x bitwise). With the complete
    graph every rank ends each step on ``mean_j x_j`` with omega = 1: the
    mixing is the allreduce average.

    Logged per step (trace.csv): ``omega`` (this rank's push-sum weight, after
    the mixing) and ``peer_offset`` (the one-peer exponential graph's offset,
    else absent). The mixing is timed as ``mix``.
    """

    name = "sgp"
    paper = ("M. Assran, N. Loizou, N. Ballas, M. Rabbat, Stochastic Gradient Push for Distributed Deep Learning, "
             "ICML 2019 (arXiv:1811.10792); push-sum: D. Kempe, A. Dobra, J. Gehrke, Gossip-Based Computation of "
             "Aggregate Information, FOCS 2003")
    POSITIONAL = ("topology",)

    @dataclass
    class Options:
        topology: str = topology_field("auto", TOPOLOGY_CHOICES, "communication graph: auto (one-peer-exponential "
                                       "on a power-of-two P, else directed-ring) or a topology name")
        seed: int = seed_field()
        radius: float = radius_field()

        def validate(self):
            validate_topology(self)

    graph_clock = "step"  # the one-peer graph of step t
    mix_order = None      # push-sum weights, not W: its own exchange below

    @staticmethod
    def resolve_topology(name: str, P: int) -> str:
        if name != "auto":
            return name
        return "one-peer-exponential" if P & (P - 1) == 0 else "directed-ring"

    @classmethod
    def step_time(cls, options, profile, P, net, phi=0.0) -> float:
        """``T = compute + deg (alpha + (n + 4) beta)``: one message of the
        numerator and the weight to each out-neighbour, independent of P
        (deg = 1 for the one-peer exponential graph and the directed ring; for
        other graphs the degree of the graph at this P). Nothing overlaps."""
        if P <= 1:
            return profile.compute
        name = cls.resolve_topology(options.topology, P)
        deg = 1 if name == "one-peer-exponential" else exchange_degree(name, P, options.seed, options.radius)
        return profile.compute + net.neighbor_time(profile.grad_bytes + 4, deg)

    @classmethod
    def default_label(cls, options) -> str:
        return cls.name if options.topology == "auto" else f"{cls.name}:{options.topology}"

    def topology_name(self) -> str:
        return self.resolve_topology(self.options.topology, self.comm.size)

    def setup(self) -> None:
        P, i = self.comm.size, self.comm.rank
        super().setup()                    # the topology (auto resolved), the same on all ranks
        self.x: np.ndarray | None = None   # the numerator; set in start() or load_state_dict()
        self.omega = np.float32(1.0)       # the push-sum weight
        self._msg = np.empty(self.flat.numel + 1, np.float32)
        self._recv = np.empty_like(self._msg)
        self._graph = None
        if P > 1 and not self.topology.period:  # a static graph: one neighbour allgather per step
            self._graph = self.comm.graph(self.topology.in_neighbors(i), self.topology.out_neighbors(i))

    def start(self, broadcast: bool = True) -> None:
        super().start(broadcast)
        if self.x is None:                 # x_i = z_i = w_0 (a resume has set x already)
            self.x = self.flat.weights.copy()

    @contextmanager
    def compute_point(self):
        """The gradient is taken at z_i, which ``self.flat.weights`` already holds."""
        yield

    def apply_update(self, direction: np.ndarray) -> None:
        """``x_i <- opt_i(x_i, g_i)``: Algorithm 1 steps the numerator, not z."""
        with self.timer.phase("update"):
            self.optimizer.apply(0, self.x, direction)

    def step(self) -> None:
        P, i, t = self.comm.size, self.comm.rank, self.step_count
        self.apply_update(self.flat.grads[self.flat.current])     # x_i = opt(x_i, g_i(z_i))
        self.log = {}
        if P > 1:
            with self.timer.phase("mix"):
                top = self.topology.at(t)
                out = top.out_neighbors(i)
                m = self._msg
                m[:-1], m[-1] = self.x, self.omega                  # (x_i, omega_i): omega rides along
                m *= np.float32(1.0 / (len(out) + 1))               # keep one share, push one to each out-neighbour
                if self._graph is None:                             # time-varying: one peer, i + 2^(t mod log2 P)
                    rows = [self.comm.sendrecv(m, out[0], top.in_neighbors(i)[0], recv=self._recv)]
                    self.log["peer_offset"] = (out[0] - i) % P
                else:
                    rows = self.comm.neighbor_allgather(self._graph, m)
                for r in rows:                                      # add what arrives, in source order
                    m += r
                self.x[...] = m[:-1]
                self.omega = np.float32(m[-1])
            self.flat.weights[...] = self.x / self.omega            # z_i = x_i / omega_i
        else:
            self.flat.weights[...] = self.x
        self.log["omega"] = float(self.omega)
        self.end_step()

    def report(self) -> dict:
        return {"topology": {**super().report()["topology"], "mixing": "push-sum, uniform split 1/(out-degree+1)"}}

    def state_dict(self) -> dict:
        return {**super().state_dict(), "numerator": self.x.copy(), "omega": float(self.omega)}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        if "numerator" in state:
            self.x = np.array(state["numerator"], np.float32)
            self.omega = np.float32(state["omega"])
