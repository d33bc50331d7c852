"""Low-rank compression by one step of power iteration with a warm start
(Vogels, Karimireddy & Jaggi, "PowerSGD: Practical Low-Rank Gradient
Compression for Distributed Optimization", NeurIPS 2019, Algorithm 1; the
DDP hook PyTorch ships, ``powerSGD_hook``).

The vector ``v`` (d,) is the concatenation of matrices ``M_k`` (``n_k x
m_k``, row-major; a conv kernel flattened to ``(out, in*kh*kw)``), and each is
sent as two factors ``P_k`` (``n_k x r``) and ``Q_k`` (``m_k x r``) with
``M_k ~ P^_k Q_k^T``. Both factors are linear in ``M_k`` once the other is
fixed and shared, so both are summable, but they cannot go in one message:
``Q_k = M_k^T P^_k`` needs ``P^_k``, the orthogonalised *mean* of the ranks'
``P_k``. Hence two rounds, each an allreduce::

    p = C.compress(v, step)        # P_i = M_i ORTHOGONALIZE(Q), Q the last mean Q (warm start)
    ... allreduce-mean p ...
    q = C.reproject(v, p_mean)     # P^ = ORTHOGONALIZE(p_mean) in place; Q_i = M_i^T P^
    ... allreduce-mean q ...
    C.decompress(Payload((p_mean, q_mean), d))   # P^ Q^T; keeps q_mean as the next warm start

That is why this compressor is not in ``COMPRESSORS`` and does not go through
:func:`~minips.distributed.compression.exchange` (one message, then
decompress): it needs the matrices' shapes, a second round that reads the
first round's mean, and state (the warm-started Q) that only the mean of the
second round updates. The error feedback around it is the shared
:class:`~minips.distributed.compression.ErrorFeedback`, fed the mean
approximation ``P^ Q^T`` (the same on every rank) rather than a local
decompression, as in the paper's Algorithm 2.

Orthogonalising the warm-started Q every step follows PyTorch's hook (the
paper's Algorithm 1 does not; in exact arithmetic the result is the same):
the kept Q = M^T P^ carries the singular values, so without it the columns
of M Q differ by (sigma_1 / sigma_r)^2 and float32 Gram-Schmidt loses the
small ones when the singular values span 1e4 or more. Gram-Schmidt makes two
passes over the earlier columns (Giraud, Langou, Rozloznik, "The loss of
orthogonality in the Gram-Schmidt orthogonalization process", Comput. Math.
Appl. 50, 2005: "twice is enough"), so that a gradient of rank below r,
whose extra columns of P are rounding, still gives orthonormal columns.
"""
from __future__ import annotations

import numpy as np

from .base import Compressor, Payload, check_vector

__all__ = ["LowRank", "orthogonalize"]


def orthogonalize(P: np.ndarray, eps: float = 1e-8) -> np.ndarray:
    """In place, Gram-Schmidt on the columns of P (n x r, float32): orthonormal
    columns spanning the same space (a zero column stays zero; a column of
    norm below ``eps`` is divided by ``eps``). Each column is projected off
    the earlier ones twice: one pass leaves a column that was nearly in
    their span far from orthogonal to them in float32. Returns P."""
    for c in range(P.shape[1]):
        col = P[:, c]
        for _ in range(2):
            for j in range(c):
                col -= np.dot(P[:, j], col) * P[:, j]
        col /= np.float32(max(float(np.linalg.norm(col)), eps))
    return P


def _views(buf: np.ndarray, sizes) -> list:
    out, pos = [], 0
    for s in sizes:
        out.append(buf[pos:pos + s])
        pos += s
    return out


class LowRank(Compressor):
    """Rank-r factors of each matrix of a concatenation, by one warm-started power iteration.

    Args:
        shapes: ``[(n, m), ...]``, the matrices in ``v`` in order (d = sum n m).
        rank: r >= 1.
        seed: seed of the initial Q (standard normal, the same on every rank).

    Attributes:
        r: the rank of the approximation.
        Q: the warm-start factors, float32 ``(m, r)`` each, identical on every rank.

    Payloads: round one ``(p,)`` float32 ``(sum n r,)``; round two ``(q,)``
    float32 ``(sum m r,)``; :meth:`decompress` takes ``(p_mean, q_mean)``.

    Raises:
        ValueError: rank < 1.
    """

    name = "lowrank"
    summable = True  # each round's factors are linear in M given the shared Q, P^

    def __init__(self, shapes, rank: int, seed: int = 0):
        super().__init__()
        if rank < 1:
            raise ValueError(f"lowrank: rank must be >= 1 (the approximation's rank r; 1-4 is usual), got {rank}")
        self.shapes, self.r = [(int(n), int(m)) for n, m in shapes], int(rank)
        rng = np.random.default_rng([seed, 0x5057])
        self.Q = [rng.standard_normal((m, rank)).astype(np.float32) for _, m in self.shapes]
        self.size = sum(n * m for n, m in self.shapes)

    def options(self):
        return {"rank": self.r}

    def _matrices(self, v) -> list:
        v = check_vector(v)
        if v.size != self.size:
            raise ValueError(f"lowrank: a vector of {v.size} entries, the matrices hold {self.size}")
        return [x.reshape(n, m) for x, (n, m) in zip(_views(v, [n * m for n, m in self.shapes]), self.shapes)]

    def compress(self, v, step=0) -> Payload:
        """Round one: ``P_k = M_k Q^_k``, Q^ the orthogonalised warm start (in place)."""
        r, M = self.r, self._matrices(v)
        p = np.zeros(sum(n * r for n, _ in self.shapes), np.float32)
        for Mk, Qk, Pk in zip(M, self.Q, _views(p, [n * r for n, _ in self.shapes])):
            orthogonalize(Qk)                                  # Q^: unit columns (see the module docstring)
            np.matmul(Mk, Qk, out=Pk.reshape(-1, r))           # P_i = M_i Q^
        return Payload((p,), self.size, step)

    def reproject(self, v, p_mean: np.ndarray, step=0) -> Payload:
        """Round two: ``P^_k = ORTHOGONALIZE(p_mean_k)`` (in place in ``p_mean``),
        then ``Q_k = M_k^T P^_k``."""
        r, M = self.r, self._matrices(v)
        q = np.zeros(sum(m * r for _, m in self.shapes), np.float32)
        for Mk, Pk, Qk in zip(M, _views(p_mean, [n * r for n, _ in self.shapes]),
                              _views(q, [m * r for _, m in self.shapes])):
            Ph = orthogonalize(Pk.reshape(-1, r))              # P^ (identical on every rank)
            np.matmul(Mk.T, Ph, out=Qk.reshape(-1, r))         # Q_i = M_i^T P^
        return Payload((q,), self.size, step)

    def decompress(self, payload) -> np.ndarray:
        """``(p_mean orthogonalised, q_mean)`` -> float32 (d,), each matrix
        ``P^ Q^T``; ``q_mean`` becomes the warm start of the next :meth:`compress`."""
        p, q = payload.arrays
        r, out = self.r, np.empty(self.size, np.float32)
        views = zip(self.shapes, _views(p, [n * r for n, _ in self.shapes]),
                    _views(q, [m * r for _, m in self.shapes]), _views(out, [n * m for n, m in self.shapes]))
        for k, ((n, m), Pk, Qk, Ok) in enumerate(views):
            self.Q[k][...] = Qk.reshape(m, r)                  # warm start for the next step
            Ok[...] = (Pk.reshape(n, r) @ self.Q[k].T).ravel()  # P^ Q^T
        return out

    def payload_bytes(self, d):
        """Bytes of both rounds together: ``4 r sum(n + m)``."""
        return 4 * self.r * sum(n + m for n, m in self.shapes)

    def state_dict(self) -> dict:
        return {"Q": [q.copy() for q in self.Q]}

    def load_state_dict(self, state: dict) -> None:
        for dst, src in zip(self.Q, state.get("Q", [])):
            dst[...] = np.asarray(src, np.float32)
