"""Heterogeneity-aware gossip (EdgeGossip), reconstructed.

RECONSTRUCTION (low confidence): R. Han, S. Li, X. Wang, C. H. Liu, G. Xin,
L. Y. Chen, "Accelerating Gossip-Based Deep Learning in Heterogeneous Edge
Computing Platforms", IEEE TPDS 32(7):1591-1602, 2021. Only the abstract was
read (docs/specifications.md section 13); the batch split by speed, the
sample-weighted pairwise average and the speed-weighted partner schedule below
are this project's reading of it, not the paper's text.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

import numpy as np

from .gossip_common import GossipAlgorithm, GossipOptions

__all__ = ["HeteroGossip", "parse_slowdown"]

_ITEM = re.compile(r"^(\d+)[*x](\d+(?:\.\d+)?)$")


def parse_slowdown(text: str) -> dict[int, float]:
    """``"1*3+2x1.5"`` -> ``{1: 3.0, 2: 1.5}`` (rank -> compute-time factor >= 1).

    Raises:
        ValueError: a malformed item, a factor below 1, or a rank given twice.
    """
    out: dict[int, float] = {}
    for item in filter(None, (s.strip() for s in text.split("+"))):
        m = _ITEM.match(item)
        if not m:
            raise ValueError(f"slowdown item {item!r} is not RANK*FACTOR; write e.g. slowdown=1*3 "
                             "(rank 1 computes 3x slower; several: 1*3+2*2; 'x' works for '*')")
        rank, factor = int(m.group(1)), float(m.group(2))
        if factor < 1 or rank in out:
            raise ValueError(f"slowdown item {item!r}: the factor must be >= 1 and each rank given once")
        out[rank] = factor
    return out


class HeteroGossip(GossipAlgorithm):
    """Heterogeneity-aware pairwise gossip (reconstruction of EdgeGossip, Han et al. 2021).

    Pseudo-code (rank i of speed s_i = 1 / f_i, f_i its slowdown factor; step t)::

        build: b_i = round(P B s_i / sum_j s_j)       # batch split by speed (balance=true)
        g_i  = gradient of rank i's batch of b_i samples at w_i
        [emulation: sleep (f_i - 1) x this step's forward+backward]
        w_i  = opt_i(w_i, g_i)                        # a local step, own momentum
        (i, j) = edge of step t's matching            # random matching of the graph's edges: rank i
                                                      #   in with prob. e_i / max e, edge (i, j) drawn
                                                      #   with weight e_i e_j (e: per-step speed)
        w_i  = (n_i w_i + n_j w_j) / (n_i + n_j)      # one exchange of [w, n] (d + 1 floats);
                                                      #   n = samples of the step (ctx.samples)

    The pairwise average keeps ``sum_i n_i w_i`` (the sample-weighted mean)
    fixed and leaves both partners bitwise equal. With equal batches it is
    randomized pairwise gossip (Boyd et al. 2006): ``balance=false:favour-fast=false``
    is plain gossip SGD, the comparison for the same slow rank.

    Relative speeds come from the ``slowdown`` option (known on every rank at
    build time, when :meth:`batch_size` is read), not from a calibration: the
    Trainer reads the batch size once, before any step is timed. A real
    deployment would time a few steps and Allgather the P throughputs
    (docs/specifications.md section 13); that part is not implemented.

    Emulated heterogeneity (``slowdown=RANK*FACTOR[+RANK*FACTOR...]``, 'x' may
    replace '*'; ':' and '=' belong to the spec grammar): rank RANK sleeps
    FACTOR - 1 times its forward + backward time of the step (as the Trainer's
    timer measured it), inside :meth:`step`, timed as the phase ``slowdown``.
    Driven outside the Trainer (no forward/backward phases) it sleeps 0.

    Every rank takes the same number of steps (the Trainer uses the fewest
    batches per epoch over ranks): with unequal batches a fast rank's larger
    batches exhaust its shard first, so a slow rank sees part of its shard per
    epoch (the data split itself is the sampler's, not changed here).

    Options (spec ``hetero-gossip:slowdown=1*3:topology=ring``): ``slowdown``,
    ``balance``, ``favour_fast``, ``topology`` (undirected, static: ring, torus,
    exponential, complete, random-geometric), ``seed`` (also seeds the partner
    schedule). Logged per step: ``partner`` (-1: none this step), ``batch``
    (this rank's samples), ``mix_weight`` (the partner's share n_j/(n_i+n_j)).
    Phases: ``slowdown``, ``update``, ``mix``.
    """

    name = "hetero-gossip"
    paper = ("RECONSTRUCTION (abstract only) of R. Han, S. Li, X. Wang, C. H. Liu, G. Xin, L. Y. Chen, Accelerating "
             "Gossip-Based Deep Learning in Heterogeneous Edge Computing Platforms, IEEE TPDS 32(7):1591-1602, 2021; "
             "docs/specifications.md section 13")

    @dataclass
    class Options(GossipOptions):
        slowdown: str = field(default="", metadata={
            "help": "emulated slow ranks RANK*FACTOR[+RANK*FACTOR...], e.g. 1*3: rank 1 computes 3x slower"})
        balance: bool = field(default=True, metadata={"help": "split the global batch in proportion to speed"})
        favour_fast: bool = field(default=True, metadata={
            "help": "slow ranks skip some exchanges; pairs drawn with weight e_i e_j (else uniformly)"})

        def validate(self):
            super().validate()
            parse_slowdown(self.slowdown)

    graph_clock = "step"  # the partner schedule is seeded by the step
    mix_order = None      # pairwise averages of its own, no neighbour Mixer

    @staticmethod
    def speeds(options, P: int) -> np.ndarray:
        """s_i = 1 / f_i for ranks 0..P-1 (ranks named beyond P are ignored)."""
        f = np.ones(P)
        for r, factor in parse_slowdown(options.slowdown).items():
            if r < P:
                f[r] = factor
        return 1.0 / f

    @classmethod
    def batch_sizes(cls, options, P: int, base: int) -> list[int]:
        """Every rank's batch: ``round(P base s_i / sum s)`` (>= 1) with balance, else base."""
        if not options.balance:
            return [base] * P
        s = cls.speeds(options, P)
        return [max(1, int(round(P * base * si / s.sum()))) for si in s]

    @classmethod
    def step_time(cls, options, profile, P, net, phi=0.0) -> float:
        """``compute x k + M``: the slowest rank paces every pairwise exchange, so
        k = max f_i with equal batches, and ``P / sum_i s_i`` with balance (each
        rank's compute is then proportional to b_i f_i, the same for all);
        M = one message of d + 1 floats (every rank matched: an upper bound)."""
        s = cls.speeds(options, P)
        k = P / s.sum() if options.balance else 1 / s.min()
        return profile.compute * k + (net.message_time(profile.grad_bytes + 4) if P > 1 else 0.0)

    @classmethod
    def default_label(cls, options) -> str:
        return f"{cls.name}:slowdown={options.slowdown}" if options.slowdown else cls.name

    def setup(self) -> None:
        P, o = self.comm.size, self.options
        for r in parse_slowdown(o.slowdown):
            if r >= P:
                raise ValueError(f"slowdown names rank {r}, but the job has {P} ranks (0..{P - 1})")
        super().setup()                         # the topology (check_graph below), the same on all ranks
        W = self.topology.W
        self.edges = [(i, j) for i in range(P) for j in range(i + 1, P) if W[i, j] > 0]
        self.s = self.speeds(o, P)
        self.factor = 1.0 / self.s[self.comm.rank]
        self.e = self.s          # per-step speed (until the batches are split)
        self.base = None
        self.msg = np.zeros(self.flat.numel + 1, np.float32)  # [w, n]

    def check_graph(self, topology) -> None:
        if topology.directed or topology.period:
            raise ValueError(f"topology={self.options.topology}: hetero-gossip averages pairwise over undirected "
                             "static edges; use ring, torus, exponential, complete or random-geometric")

    def batch_size(self, base: int) -> int:
        self.base = base
        bs = self.batch_sizes(self.options, self.comm.size, base)
        self.e = self.s * base / np.array(bs)   # a balanced split makes every rank's step equally long
        return bs[self.comm.rank]

    def report(self) -> dict:
        P = self.comm.size
        out = {**super().report(), "speeds": self.s.tolist()}
        if self.base is not None:
            out["batch_sizes"] = self.batch_sizes(self.options, P, self.base)
        return out

    def partner(self, t: int) -> int:
        """Step t's partner of this rank, -1 if unmatched; the same on every rank
        (seeded by (seed, t)). With favour_fast, rank i takes part with
        probability e_i / max e (e = per-step speed: s_i, or s_i base / b_i once
        the batches are split, so balanced ranks are all available) and the edges
        are drawn in the order of keys ``u^(1/(e_i e_j))`` (Efraimidis-Spirakis
        weighted sampling), then matched greedily; else every rank, uniformly."""
        rng = np.random.default_rng([self.options.seed, t])
        e, P = self.e, self.comm.size
        fav = self.options.favour_fast
        avail = rng.random(P) < e / e.max() if fav else np.ones(P, bool)
        wts = np.array([e[i] * e[j] if fav else 1.0 for i, j in self.edges])
        order = np.argsort(-rng.random(len(self.edges)) ** (1.0 / wts), kind="stable")
        mate = [-1] * P
        for k in order:
            i, j = self.edges[k]
            if avail[i] and avail[j] and mate[i] < 0 and mate[j] < 0:
                mate[i], mate[j] = j, i
        return mate[self.comm.rank]

    def slow_down(self) -> None:
        """Emulation: sleep (f_i - 1) x this step's forward + backward."""
        if self.factor > 1:
            compute = self.timer.current.get("forward", 0.0) + self.timer.current.get("backward", 0.0)
            with self.timer.phase("slowdown"):
                time.sleep((self.factor - 1) * compute)

    def gossip(self, t: int) -> None:
        """The sample-weighted pairwise average with step t's partner (if any)."""
        j, w, n = self.partner(t), self.flat.weights, float(self.ctx.samples or 1)
        share = 0.0
        if j >= 0:
            with self.timer.phase("mix"):
                self.msg[:-1], self.msg[-1] = w, n
                got = self.comm.sendrecv(self.msg, j, j)        # [w_j, n_j]
                total = n + float(got[-1])
                share = float(got[-1]) / total
                a_i, a_j = np.float32(n / total), np.float32(share)
                w[...] = a_i * w + a_j * got[:-1]               # the same sum on both partners: equal bitwise
        self.log = {"partner": j, "batch": int(n), "mix_weight": share}

    def step(self) -> None:
        self.slow_down()
        self.apply_update(self.flat.grads[0])                    # a local step on b_i samples
        self.gossip(self.step_count)
        self.end_step()
