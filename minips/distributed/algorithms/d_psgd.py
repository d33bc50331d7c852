"""D-PSGD: decentralized parallel SGD, each rank averaging with its neighbours.

Lian, Zhang, Zhang, Hsieh, Zhang & Liu, "Can Decentralized Algorithms
Outperform Centralized Algorithms? A Case Study for Decentralized Parallel
Stochastic Gradient Descent", NeurIPS 2017 (arXiv:1705.09056).
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field

from .gossip_common import GossipAlgorithm, gossip_time, radius_field, seed_field, topology_field, validate_topology

__all__ = ["DPSGD"]

FORMS = ("cta", "atc")


class DPSGD(GossipAlgorithm):
    """D-PSGD: mix the weights with the neighbours', step with the own gradient.

    Pseudo-code (Lian et al. 2017, Algorithm 1; rank i, step t; W the mixing
    matrix of ``topology``, ``mix(v)_i = sum_j W_ij v_j``)::

        form=cta (combine then adapt, the paper's rule; default):
            post the exchange of w_i          # at compute_point entry, nonblocking
            g_i = gradient at w_i             # forward + backward overlap the exchange
            w_i = opt_i(mix(w)_i, g_i)        # wait, combine, then the local optimizer step
        form=atc (adapt then combine; Gossip SGD of Chen et al. 2021):
            z_i = opt_i(w_i, g_i)
            w_i = mix(z)_i                    # blocking: the exchange needs z_i

    ``opt_i`` is this rank's optimizer with its own momentum buffer (never
    exchanged). With plain SGD, cta is exactly the paper's
    ``w_i <- sum_j W_ij w_j - lr g_i(w_i)``; with momentum mu the "adapt" part
    is the optimizer step ``v_i <- mu v_i + g_i; w_i <- mix(w)_i - lr v_i``
    (cta) or ``w_i <- mix(w_i - lr v_i)`` (atc).

    With the complete graph (``W = 11^T/P``) atc is synchronous SGD: the ranks
    start equal, ``mean_i opt_i(w, g_i) = w - lr mean_i v_i`` and ``mean_i v_i``
    obeys sync's recursion, so after every step every rank holds sync's
    weights. cta is not: ``w_i <- mean(w) - lr v_i`` leaves each rank at its
    own gradient step, so the ranks differ by ``lr (v_i - v_j)`` and every
    gradient is taken at a different point than sync's (tests/test_d_psgd.py
    checks both).

    Time-varying graphs (``one-peer-exponential``: one peer at offset
    ``2^(t mod log2 P)``) exchange with one blocking ``sendrecv`` in step():
    the send and receive peers differ, which the nonblocking pairwise exchange
    of comm does not support, so cta does not overlap there.

    Options (spec ``d-psgd:topology=ring:form=cta``): topology (default ring),
    form (cta | atc), and seed / radius for random-geometric.

    Logged: the phases post, wait (cta) and mix; bytes sent are counted by comm.
    """

    name = "d-psgd"
    paper = ("X. Lian, C. Zhang, H. Zhang, C.-J. Hsieh, W. Zhang, J. Liu, Can Decentralized Algorithms Outperform "
             "Centralized Algorithms? A Case Study for Decentralized Parallel Stochastic Gradient Descent, "
             "NeurIPS 2017 (arXiv:1705.09056)")
    POSITIONAL = ("topology",)

    @dataclass
    class Options:
        topology: str = topology_field()
        form: str = field(default="cta", metadata={
            "choices": FORMS, "help": "cta: w <- opt(mix(w), g(w)), exchange overlapping the gradient; "
                                      "atc: w <- mix(opt(w, g)), blocking"})
        seed: int = seed_field()
        radius: float = radius_field()

        def validate(self):
            validate_topology(self)
            if self.form not in FORMS:
                raise ValueError(f"form must be cta or atc, got {self.form!r}")

    @classmethod
    def step_time(cls, options, profile, P, net, phi=0.0) -> float:
        """N = one exchange of the weights (grad_bytes) with the neighbours,
        ``degree (alpha + n beta)`` (one message for one-peer-exponential).
        cta on a static graph hides it behind forward + backward::

            hidden = min(N, forward + backward);  T = compute + phi hidden + (N - hidden)

        atc (and cta on a time-varying graph) blocks: ``T = compute + N``."""
        N = gossip_time(options, profile.grad_bytes, P, net)
        if options.form == "atc" or options.topology == "one-peer-exponential":
            return profile.compute + N
        hidden = min(N, profile.forward + profile.backward)
        return profile.compute + phi * hidden + (N - hidden)

    @classmethod
    def default_label(cls, options) -> str:
        return f"{cls.name}:{options.topology}" + (":atc" if options.form == "atc" else "")

    def setup(self) -> None:
        super().setup()
        self.pending = None  # cta: the exchange of this step's weights

    @contextmanager
    def compute_point(self):
        """cta: post the exchange of the current weights; the gradient is taken
        at the same weights while it travels."""
        if self.options.form == "cta" and self.pending is None:
            with self.timer.phase("post"):
                self.pending = self.mixer.post(self.flat.weights, self.mix_rounds)
        yield

    def step(self) -> None:
        g = self.flat.grads[0]
        if self.options.form == "atc":
            self.apply_update(g)                        # z_i = opt_i(w_i, g_i)
            self.gossip()                               # w_i = mix(z)_i
        else:
            if self.pending is None:                    # driven without compute_point
                self.pending = self.mixer.post(self.flat.weights, self.mix_rounds)
            with self.timer.phase("wait"):
                mixed = self.mixer.complete(self.pending)  # mix(w)_i, w from before the gradient
            self.pending, self.mix_rounds = None, self.mix_rounds + 1
            self.flat.weights[...] = mixed
            self.apply_update(g)                        # w_i = opt_i(mix(w)_i, g_i)
        self.end_step()

    def drain(self) -> None:
        """Complete an exchange in flight and keep its result (used by step())."""
        if self.pending is not None:
            self.mixer.complete(self.pending)
        super().drain()
