"""Sparse communication graphs for the gossip lab: the same graphs as
:mod:`minips.distributed.topology` (same edges, same Metropolis-Hastings
weights), stored as edge lists so that 10,000 nodes fit in a few MB (a dense
10,000 x 10,000 mixing matrix would take 800 MB).

A :class:`Graph` holds directed edges ``src[e] -> dst[e]`` with the weight
``weight[e] = W[dst, src]`` and the diagonal ``self_weight[i] = W[i, i]``; one
gossip step is ``x_i <- self_weight[i] x_i + sum_{e: dst[e] = i} weight[e] x_{src[e]}``.
An undirected edge is stored twice (both directions).

Eigenvalues: the ring, torus and exponential graphs are Cayley graphs of Z_n
(or Z_r x Z_c) with one weight per edge class, so W is circulant (block
circulant) and its eigenvalues are the (2-D) discrete Fourier transform of the
first row: exact for any n in O(n log n). Other graphs use a dense eigenvalue
solver up to :data:`DENSE_LIMIT` nodes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

__all__ = ["Graph", "GRAPHS", "make_graph", "DENSE_LIMIT", "mh_weights"]

#: largest n for which a dense W (and its eigenvalues) is built on demand
DENSE_LIMIT = 2048


@dataclass(frozen=True, eq=False)
class Graph:
    """A (possibly directed, possibly time-varying) weighted graph on ``n`` nodes.

    Attributes:
        name: the kind (a key of :data:`GRAPHS`).
        n: number of nodes.
        src, dst: int64 arrays of shape (E,): edge e carries src[e]'s value to dst[e].
        weight: float64 (E,), ``W[dst[e], src[e]]``.
        self_weight: float64 (n,), ``W[i, i]``.
        directed: True if some edge goes one way only.
        period: 0 if static; else the number of matrices cycled through (:meth:`at`).
        fourier_shape: (n,) or (r, c) when W is (block) circulant, else None.
    """
    name: str
    n: int
    src: np.ndarray
    dst: np.ndarray
    weight: np.ndarray
    self_weight: np.ndarray
    directed: bool = False
    period: int = 0
    fourier_shape: tuple | None = None
    _build: object = field(default=None, repr=False)

    def at(self, t: int) -> "Graph":
        """The graph of round ``t`` (itself when static)."""
        return self if not self.period else self._build(t % self.period)

    @property
    def num_edges(self) -> int:
        """Directed edges (an undirected edge counts twice)."""
        return len(self.src)

    def out_degree(self) -> np.ndarray:
        """int64 (n,): messages each node sends per mixing round."""
        return np.bincount(self.src, minlength=self.n)

    def in_neighbors(self, i: int) -> np.ndarray:
        """Nodes whose value node i mixes in, ascending (int64)."""
        return np.sort(self.src[self.dst == i])

    def out_neighbors(self, i: int) -> np.ndarray:
        """Nodes that mix in node i's value, ascending (int64)."""
        return np.sort(self.dst[self.src == i])

    def csr_out(self):
        """``(indptr, nbrs)``: node i's out-neighbours are ``nbrs[indptr[i]:indptr[i+1]]``, ascending."""
        order = np.lexsort((self.dst, self.src))
        indptr = np.zeros(self.n + 1, np.int64)
        np.cumsum(np.bincount(self.src, minlength=self.n), out=indptr[1:])
        return indptr, self.dst[order]

    def undirected_edges(self) -> np.ndarray:
        """(m, 2) int64 array of the undirected edges (i < j), sorted."""
        a, b = np.minimum(self.src, self.dst), np.maximum(self.src, self.dst)
        return np.unique(np.stack([a, b], axis=1), axis=0)

    def dense(self) -> np.ndarray:
        """The (n, n) float64 mixing matrix W (only for n <= DENSE_LIMIT).

        Raises:
            ValueError: n > DENSE_LIMIT.
        """
        if self.n > DENSE_LIMIT:
            raise ValueError(f"a dense {self.n} x {self.n} matrix is too large (limit {DENSE_LIMIT} nodes)")
        W = np.diag(self.self_weight.astype(np.float64))
        np.add.at(W, (self.dst, self.src), self.weight)
        return W

    def eigenvalues(self) -> np.ndarray | None:
        """All eigenvalues of W (complex128, (n,)), or None when n is too large
        for a dense solver and W is not circulant. For a time-varying graph:
        those of round 0's matrix. The symmetric solver only where W equals
        its transpose; the general one otherwise (a directed graph, or
        push-sum's matrix on an irregular graph)."""
        if self.fourier_shape is not None:
            row = np.zeros(self.n)
            row[0] = self.self_weight[0]
            first = self.dst == 0  # W[0, j] for the in-neighbours j of node 0
            np.add.at(row, self.src[first], self.weight[first])
            # W[i, j] = row[(j - i) mod n]: eigenvalues = DFT of the first row (conjugated: same set for real W)
            return np.fft.fftn(row.reshape(self.fourier_shape)).ravel()
        if self.n > DENSE_LIMIT:
            return None
        W = self.dense()
        # eigvalsh reads one triangle only: right for a symmetric W, silently wrong otherwise (push-sum's
        # column-stochastic matrix on an irregular undirected graph is not symmetric, yet not "directed")
        return np.linalg.eigvalsh(W).astype(complex) if np.array_equal(W, W.T) else np.linalg.eigvals(W)

    def lambda2(self) -> float | None:
        """``|lambda_2(W)|``, the second-largest eigenvalue modulus (None if not computable)."""
        ev = self.eigenvalues()
        if ev is None:
            return None
        if self.n == 1:
            return 0.0
        return float(np.sort(np.abs(ev))[::-1][1])

    def check_connected(self) -> None:
        """Raise unless every node is reachable from node 0 along edges in
        either direction (a disconnected graph never averages).

        Raises:
            ValueError: naming the graph, the number of nodes reached, and a fix.
        """
        seen = np.zeros(self.n, bool)
        seen[0] = True
        while True:
            grow = np.zeros(self.n, bool)
            grow[self.dst[seen[self.src]]] = True
            grow[self.src[seen[self.dst]]] = True
            new = grow & ~seen
            if not new.any():
                break
            seen |= new
        if not seen.all():
            raise ValueError(f"--topology {self.name} on {self.n} nodes is disconnected (node 0 reaches "
                             f"{int(seen.sum())} of {self.n}): gossip would never reach the global mean; "
                             "use more edges (e.g. a larger --radius) or another topology")


def mh_weights(n: int, edges: np.ndarray, name: str, fourier_shape=None) -> Graph:
    """Metropolis-Hastings weights ``1 / (1 + max(deg_i, deg_j))`` on the
    undirected edges ``edges`` ((m, 2) ints; self-loops and repeats dropped)."""
    e = np.asarray(edges, np.int64).reshape(-1, 2)
    e = e[e[:, 0] != e[:, 1]]
    e = np.unique(np.sort(e, axis=1), axis=0)
    src = np.concatenate([e[:, 0], e[:, 1]])
    dst = np.concatenate([e[:, 1], e[:, 0]])
    deg = np.bincount(src, minlength=n)
    w = 1.0 / (1.0 + np.maximum(deg[src], deg[dst]))
    self_w = 1.0 - np.bincount(dst, weights=w, minlength=n)
    g = Graph(name, n, src, dst, w, self_w, fourier_shape=fourier_shape)
    g.check_connected()
    return g


def ring(n: int, **_) -> Graph:
    """i linked with i +- 1 (weights 1/3 for n >= 3)."""
    i = np.arange(n)
    return mh_weights(n, np.stack([i, (i + 1) % n], 1), "ring", (n,))


def torus(n: int, **_) -> Graph:
    """r x c torus, r the largest divisor of n not above sqrt(n) (as topology.torus)."""
    r = max(d for d in range(1, math.isqrt(n) + 1) if n % d == 0)
    c = n // r
    a, b = np.divmod(np.arange(n), c)
    edges = np.concatenate([np.stack([a * c + b, a * c + (b + 1) % c], 1),
                            np.stack([a * c + b, ((a + 1) % r) * c + b], 1)])
    return mh_weights(n, edges, "torus", (r, c))


def exponential(n: int, **_) -> Graph:
    """i linked with i +- 2^k (mod n) for 2^k < n (as topology.exponential)."""
    i = np.arange(n)
    K = max(1, math.ceil(math.log2(n)))
    edges = np.concatenate([np.stack([i, (i + 2 ** k) % n], 1) for k in range(K)])
    return mh_weights(n, edges, "exponential", (n,))


def complete(n: int, **_) -> Graph:
    """Everyone with everyone, ``W = 11^T / n`` (one round averages exactly)."""
    if n > DENSE_LIMIT:
        raise ValueError(f"--topology complete on {n} nodes has {n * (n - 1)} edges; use at most {DENSE_LIMIT} nodes")
    i, j = np.nonzero(~np.eye(n, dtype=bool))
    return Graph("complete", n, j.astype(np.int64), i.astype(np.int64), np.full(len(i), 1.0 / n),
                 np.full(n, 1.0 / n), fourier_shape=(n,))


def random_geometric(n: int, radius: float | None = None, seed: int = 0, **_) -> Graph:
    """Seeded uniform points of the unit square linked when closer than
    ``radius`` (default ``1.5 sqrt(ln n / n)``, as topology.random_geometric;
    the same points for the same seed). Pairs are found cell by cell, so
    10,000 nodes take well under a second."""
    if radius is None:
        radius = min(1.5, 1.5 * math.sqrt(max(math.log(n), 1.0) / n))
    pts = np.random.default_rng(seed).random((n, 2))
    if n <= DENSE_LIMIT:
        d = np.linalg.norm(pts[:, None] - pts[None], axis=-1)
        i, j = np.nonzero(np.triu(d < radius, 1))
    else:  # grid of cells of side >= radius: compare each point with the 3 x 3 cells around it
        k = max(1, int(1.0 / radius))
        cell = np.minimum((pts * k).astype(np.int64), k - 1)
        cid = cell[:, 0] * k + cell[:, 1]
        order = np.argsort(cid, kind="stable")
        starts = np.searchsorted(cid[order], np.arange(k * k + 1))
        ii, jj = [], []
        for dx in (-1, 0, 1):
            for dy in (-1, 0, 1):
                nx, ny = cell[:, 0] + dx, cell[:, 1] + dy
                ok = (nx >= 0) & (nx < k) & (ny >= 0) & (ny < k)
                for p in np.flatnonzero(ok):
                    c = nx[p] * k + ny[p]
                    q = order[starts[c]:starts[c + 1]]
                    q = q[(q > p) & (np.linalg.norm(pts[q] - pts[p], axis=1) < radius)]
                    ii.append(np.full(len(q), p))
                    jj.append(q)
        i, j = np.concatenate(ii), np.concatenate(jj)
    return mh_weights(n, np.stack([i, j], 1), "random-geometric")


def tree(n: int, seed: int = 0, **_) -> Graph:
    """A random recursive tree: node i >= 1 hangs under a uniformly chosen
    earlier node (seeded). Periodic gossip's per-period rate on a tree does not
    depend on the edge order (Yu et al.)."""
    parent = np.random.default_rng(seed).integers(0, np.maximum(np.arange(1, n), 1))
    return mh_weights(n, np.stack([parent, np.arange(1, n)], 1), "tree")


def directed_ring(n: int, **_) -> Graph:
    """i keeps 1/2 and sends 1/2 to i+1: ``W = (I + S)/2`` (column and row stochastic)."""
    i = np.arange(n, dtype=np.int64)
    return Graph("directed-ring", n, i, (i + 1) % n, np.full(n, 0.5), np.full(n, 0.5), directed=n > 2,
                 fourier_shape=(n,))


def one_peer_exponential(n: int, **_) -> Graph:
    """Time-varying: at round t node i sends half to i + 2^(t mod log2 n) and
    keeps half (n a power of two: the product over one period is exactly 11^T/n)."""
    if n & (n - 1):
        raise ValueError(f"--topology one-peer-exponential needs a power-of-two -n, got {n}; "
                         "use 2, 4, 8, ... nodes, or exponential / ring")
    L = max(1, int(math.log2(n)))
    i = np.arange(n, dtype=np.int64)

    def build(t: int) -> Graph:
        return Graph("one-peer-exponential", n, i, (i + 2 ** (t % L)) % n, np.full(n, 0.5), np.full(n, 0.5),
                     directed=n > 2, period=L, fourier_shape=(n,), _build=build)
    return build(0)


#: name -> builder(n, radius=None, seed=0)
GRAPHS = {
    "ring": ring,
    "torus": torus,
    "exponential": exponential,
    "complete": complete,
    "random-geometric": random_geometric,
    "tree": tree,
    "directed-ring": directed_ring,
    "one-peer-exponential": one_peer_exponential,
}


def make_graph(name: str, n: int, radius: float | None = None, seed: int = 0) -> Graph:
    """The graph ``name`` on ``n`` nodes.

    Raises:
        ValueError: unknown name, n < 2, a disconnected graph, or
            one-peer-exponential with n not a power of two.
    """
    if name not in GRAPHS:
        raise ValueError(f"unknown --topology {name!r}; choose one of {', '.join(GRAPHS)}")
    if n < 2:
        raise ValueError(f"-n {n}: averaging needs at least 2 nodes (with one node the mean is its value)")
    return GRAPHS[name](n, radius=radius, seed=seed)
