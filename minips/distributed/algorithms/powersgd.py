"""PowerSGD: a rank-r approximation of every weight matrix's gradient by one
power iteration with warm start, two allreduces of small factors, error feedback.

T. Vogels, S. P. Karimireddy, M. Jaggi, "PowerSGD: Practical Low-Rank Gradient
Compression for Distributed Optimization", NeurIPS 2019 (arXiv:1905.13727),
Algorithm 1 with error feedback (Algorithm 2); the compression hook PyTorch
DDP ships (``torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook``).
For every weight gradient reshaped to a matrix ``n x m`` (a conv kernel
``(out, in*kh*kw)``), rank i, step t::

    M_i = G_i + E_i                        # error feedback
    Q^ = ORTHOGONALIZE(Q)                  # Q (m x r) is last step's (warm start)
    P_i = M_i Q^                           # n x r
    P = ALLREDUCE-MEAN(P_i)                # first allreduce: all P's in one buffer
    P^ = ORTHOGONALIZE(P)                  # Gram-Schmidt on the r columns
    Q_i = M_i^T P^                         # m x r
    Q = ALLREDUCE-MEAN(Q_i)                # second allreduce: all Q's
    E_i = M_i - P^ Q^T                     # what rank i's approximation missed
    G = P^ Q^T                             # the same on every rank: replicas stay identical
    w = opt(w, G)

The power iteration is the compressor
:class:`~minips.distributed.compression.LowRank` (its docstring: why two
rounds, why Q is orthogonalised every step) and ``E`` is the shared
:class:`~minips.distributed.compression.ErrorFeedback` over the matrices'
entries, fed the mean approximation ``P^ Q^T``. This file keeps what the
method adds: which tensors are compressed, the two allreduces, the warm-up.

As in the paper (and PyTorch's hook), tensors that are not matrices (biases)
go uncompressed: their gradients ride along in the first allreduce, averaged
exactly; so do matrices where the factors would not be smaller
(``r (n + m) >= n m``). Before ``start`` steps every gradient is allreduced
whole (PyTorch's ``start_powerSGD_iter``; default 0, the paper's rule from the
first step). Q starts from a standard normal matrix drawn from a seed shared
by all ranks. Bytes per step: ``4 (sum r (n + m) + uncompressed)`` in two
allreduces.

Options: ``rank`` (r, default 2), ``start`` (0), ``error_feedback`` (true), ``seed`` (0).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..compression import LowRank, Payload, make_memory
from ..compression.lowrank import orthogonalize
from .base import Algorithm

__all__ = ["PowerSGD", "orthogonalize"]

#: modelled compute per step: ~4 n m r multiply-adds (M Q, M^T P, P Q^T, the error) at this rate,
#: measured for a 649 x 649 matrix, r = 2, one thread (1.8e10 /s; CPU time,
#: docs/bench/compression/compress-time.json); smaller matrices run slower than this
FLOPS = 1.8e10


class PowerSGD(Algorithm):
    """PowerSGD (Vogels et al. 2019): rank-r power-iteration compression with warm start and error feedback."""

    name = "powersgd"
    family = "compression"
    paper = ("T. Vogels, S. P. Karimireddy, M. Jaggi, PowerSGD: Practical Low-Rank Gradient Compression for "
             "Distributed Optimization, NeurIPS 2019 (arXiv:1905.13727)")
    POSITIONAL = ("rank",)
    per_rank_state = True  # each rank's error E_i

    @dataclass
    class Options:
        rank: int = field(default=2, metadata={"help": "r: rank of each matrix's approximation"})
        start: int = field(default=0, metadata={"help": "steps of plain allreduce before compressing",
                                                "unit": "steps"})
        error_feedback: bool = field(default=True, metadata={
            "help": "add what the approximation missed to the next gradient"})
        seed: int = field(default=0, metadata={"help": "seed of the initial Q (shared by all ranks)"})

        def validate(self):
            if self.rank < 1:
                raise ValueError(f"rank must be >= 1 (the approximation's rank r; 1-4 is usual), got {self.rank}")
            if self.start < 0:
                raise ValueError(f"start must be >= 0 (steps of plain allreduce first), got {self.start}")

    @staticmethod
    def matrix_shape(shape) -> tuple | None:
        """``(n, m)`` a parameter of this shape is compressed as, or None (a vector)."""
        if len(shape) < 2:
            return None
        return int(shape[0]), int(np.prod(shape[1:]))

    @classmethod
    def plan(cls, shapes, r: int):
        """Which parameters are compressed: (list of (index, n, m), floats of
        the first allreduce, floats of the second)."""
        mats, plain = [], 0
        for i, shape in enumerate(shapes):
            nm = cls.matrix_shape(shape)
            if nm is not None and r * (nm[0] + nm[1]) < nm[0] * nm[1]:
                mats.append((i, *nm))
            else:
                plain += int(np.prod(shape)) if shape else 1
        return mats, sum(n * r for _, n, _ in mats) + plain, sum(m * r for _, _, m in mats)

    PROFILE_EXTRAS = {"shapes": "the model's parameter shapes (tuples of ints, holding grad_bytes / 4 floats); "
                                "absent: estimated from grad_bytes"}

    @classmethod
    def profile_extras(cls, options, shapes, phases) -> dict:
        return {"shapes": tuple(tuple(int(n) for n in s) for s in shapes)}

    @classmethod
    def step_time(cls, options, profile, P, net, phi=0.0) -> float:
        """``T = compute + 4 r sum(n m) / FLOPS + A(4 p) + A(4 q)``: two
        blocking allreduces of the factors, p = ``sum r n + uncompressed``
        floats and q = ``sum r m``, with n x m the compressed matrices of
        :meth:`plan` (from the profile's ``shapes``). Without shapes the profile
        gives only d = grad_bytes / 4, and the model is taken as one square
        ``sqrt(d) x sqrt(d)`` matrix (an estimate: p = q = r sqrt(d)). The
        steady state: the ``start`` steps of plain allreduce are not counted."""
        r, shapes = options.rank, profile.extras.get("shapes")
        if shapes:
            if not math.isclose(4 * sum(math.prod(s) for s in shapes), profile.grad_bytes, rel_tol=1e-9):
                raise ValueError(f"StepProfile: shapes hold {sum(math.prod(s) for s in shapes)} floats "
                                 f"(4 bytes each), grad_bytes is {profile.grad_bytes}")
            mats, p, q = cls.plan(shapes, r)
            flops = 4 * r * sum(n * m for _, n, m in mats)
        else:
            d = profile.grad_bytes / 4
            p = q = r * np.sqrt(d)
            flops = 4 * r * d
        return profile.compute + flops / FLOPS + net.allreduce_time(4 * p, P) + net.allreduce_time(4 * q, P)

    def setup(self) -> None:
        r = self.options.rank
        shapes = [p.shape for p in self.flat.params]
        self.mats, n_p, n_q = self.plan(shapes, r)
        compressed = {i for i, _, _ in self.mats}
        self.plain = [i for i in range(len(shapes)) if i not in compressed]
        self.compressor = LowRank([(n, m) for _, n, m in self.mats], r, self.options.seed)
        self.memory = make_memory(self.options.error_feedback, self.compressor.size)  # E_i, the matrices' entries
        self.p_buf = np.zeros(n_p, np.float32)  # the P's, then the uncompressed tensors: one allreduce
        self.out = np.zeros_like(self.flat.weights)

    def step(self) -> None:
        g = self.flat.grads[0]
        if self.step_count < self.options.start:  # warm-up: plain synchronous SGD
            self.timer.add("wait", self.comm.allreduce(g))
            self.apply_update(self.average(g))
            return self.end_step()
        C, t = self.compressor, self.step_count
        with self.timer.phase("compress"):
            grads = [self.flat._view(g, i).ravel() for i, _, _ in self.mats]
            M = self.memory.add(np.concatenate(grads) if grads else np.zeros(0, np.float32))  # M_i = G_i + E_i
            p = C.compress(M, t).arrays[0]                                # P_i = M_i Q^
            plain = [self.flat._view(g, i).ravel() for i in self.plain]
            self.p_buf[:p.size] = p
            self.p_buf[p.size:] = np.concatenate(plain) if plain else []  # vectors ride along, uncompressed
        self.timer.add("wait", self.comm.allreduce(self.p_buf))          # first allreduce
        self.average(self.p_buf)
        P_mean = self.p_buf[:p.size]
        with self.timer.phase("compress"):
            q = C.reproject(M, P_mean, t).arrays[0]                      # P^ in place; Q_i = M_i^T P^
        self.timer.add("wait", self.comm.allreduce(q))                  # second allreduce
        self.average(q)
        with self.timer.phase("decompress"):
            approx = C.decompress(Payload((P_mean, q), C.size, t))        # P^ Q^T; Q kept as warm start
            self.memory.keep(M, approx)                                   # E_i = M_i - P^ Q^T
            pos = 0
            for i, n, m in self.mats:
                self.flat._view(self.out, i)[...] = approx[pos:pos + n * m].reshape(self.flat.params[i].shape)
                pos += n * m
            off = p.size
            for i in self.plain:
                v = self.flat._view(self.out, i)
                v[...] = self.p_buf[off:off + v.size].reshape(v.shape)
                off += v.size
        self.log = {"wire_bytes": self.p_buf.nbytes + q.nbytes}
        self.apply_update(self.out)
        self.end_step()

    def report(self) -> dict:
        return {"compressed_matrices": [(int(n), int(m)) for _, n, m in self.mats],
                "floats_per_step": int(self.p_buf.size + sum(m * self.options.rank for _, _, m in self.mats)),
                "model_floats": int(self.flat.numel)}

    def state_dict(self) -> dict:
        return {**super().state_dict(), **self.compressor.state_dict(), "memory": self.memory.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.compressor.load_state_dict(state)
        self.memory.load_state_dict(state.get("memory", {}))
