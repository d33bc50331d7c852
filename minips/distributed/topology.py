"""Communication graphs: who talks to whom, with which weights. The one graph
library of minips, used by the gossip training algorithms (a graph on the P
ranks of a job) and by the averaging lab (up to 10,000 simulated nodes).
NumPy (and SciPy's csgraph for connectivity, :func:`components`), no MPI: every rank
builds the same graph from the same arguments (:func:`check_same_on_all_ranks` verifies it).

A :class:`Topology` is a **mixing matrix** ``W`` (float64) on n nodes: one
gossip step replaces node i's vector by ``x_i <- sum_j W_ij x_j``, and
``W_ij > 0`` only when j sends to i (j is an *in-neighbour* of i) or j = i.
It is stored as an edge list, so that 10,000 nodes fit in a few MB (a dense
10,000 x 10,000 W takes 800 MB): directed edges ``src[e] -> dst[e]`` with
``weight[e] = W[dst[e], src[e]]``, and the diagonal ``self_weight[i] = W[i, i]``;
an undirected edge is stored twice (both directions). ``Topology.W`` builds
the dense matrix on demand (the trainers' graphs have P nodes, one per rank).

- Undirected graphs get **Metropolis-Hastings** weights (Xiao & Boyd, "Fast
  linear iterations for distributed averaging", 2004):
  ``W_ij = 1 / (1 + max(deg_i, deg_j))`` on each edge, ``W_ii = 1 - sum_j W_ij``.
  W is symmetric and doubly stochastic, so a gossip step preserves the mean of
  the x_i, and repeated steps converge to it at the rate ``|lambda_2(W)|``.
- ``complete`` uses ``W = 11^T / n``: one gossip step *is* the allreduce average.
- ``directed-ring`` (push-sum, Kempe et al. 2003): node i keeps 1/2 and sends
  1/2 to i+1: ``W = (I + S)/2`` is column stochastic (a push-sum step preserves
  the sum of the x_i and of the weights).
- ``one-peer-exponential`` is time-varying (Assran et al., ICML 2019; Ying et
  al., NeurIPS 2021): at step t node i averages with the single peer at offset
  ``2^(t mod log2 n)``, ``W_t = (I + S_t)/2`` (n must be a power of two).
- ``tree`` (a seeded random recursive tree) is a lab graph for periodic
  gossip; the trainers' ``topology`` option offers the others
  (:data:`TOPOLOGIES`).

The **spectral gap** ``1 - |lambda_2|`` (``lambda_2`` the second-largest
eigenvalue in modulus) says how fast gossip mixes: 1 for the complete graph,
about ``4 pi^2 / (3 n^2)`` for a ring with weights 1/3 (its eigenvalues are
``1/3 + 2/3 cos(2 pi k / n)``). The ring, torus, exponential, complete,
directed-ring and one-peer exponential graphs are Cayley graphs of Z_n (the
torus of Z_r x Z_c) with one weight per edge class, so W is circulant (block
circulant) and its eigenvalues are the (2-D) discrete Fourier transform of its
first row: exact for any n in O(n log n). Other graphs use a dense eigenvalue
solver up to :data:`DENSE_LIMIT` nodes.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

__all__ = ["DENSE_LIMIT", "GRAPHS", "TOPOLOGIES", "Topology", "check_same_on_all_ranks", "make_topology",
           "metropolis_weights", "second_eigenvalue_modulus", "spectral_gap"]

#: largest n for which the library builds a dense n x n matrix by itself (the
#: lab's eigenvalues, the Metropolis-Hastings diagonal); 32 MB of float64
DENSE_LIMIT = 2048


@dataclass(frozen=True, eq=False)
class Topology:
    """A (possibly directed, possibly time-varying) weighted graph on ``n`` nodes and its mixing matrix.

    Attributes:
        name: the kind (a key of :data:`GRAPHS`).
        n: number of nodes (ranks, for a trainer: also :attr:`P`).
        src, dst: int64 arrays of shape (E,): edge e carries src[e]'s value to dst[e].
        weight: float64 (E,), ``W[dst[e], src[e]]`` (> 0).
        self_weight: float64 (n,), ``W[i, i]``.
        directed: True if some edge goes one way only (push-sum graphs).
        period: 0 for a static graph; for a time-varying one, the number of
            distinct matrices it cycles through (:meth:`at` gives step t's).
        fourier_shape: (n,) or (r, c) when W is (block) circulant, else None.
        layout: (n, 2) float64 positions that show the graph's shape, or None
            (then a drawing puts the nodes on a circle): the torus's grid
            (column, -row), the random geometric graph's points in the unit square.
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
    layout: np.ndarray | None = field(default=None, repr=False)
    _build: object = field(default=None, repr=False)

    @property
    def P(self) -> int:
        """The number of ranks (= :attr:`n`) of a trainer's graph."""
        return self.n

    def at(self, t: int) -> "Topology":
        """The graph of step (round) ``t`` (itself for a static graph)."""
        return self if not self.period else self._build(t % self.period)

    # --- neighbours ----------------------------------------------------------
    @property
    def num_edges(self) -> int:
        """Directed edges (an undirected edge counts twice)."""
        return len(self.src)

    def out_degree(self) -> np.ndarray:
        """int64 (n,): messages each node sends per mixing step."""
        return np.bincount(self.src, minlength=self.n)

    def degree(self, i: int) -> int:
        """Messages node i sends per gossip step (its out-degree)."""
        return int(np.count_nonzero(self.src == i))

    def in_neighbors(self, i: int) -> list[int]:
        """Nodes j != i whose values node i mixes in (``W[i, j] > 0``), ascending."""
        return np.sort(self.src[self.dst == i]).tolist()

    def out_neighbors(self, i: int) -> list[int]:
        """Nodes j != i that mix in node i's value (``W[j, i] > 0``), ascending."""
        return np.sort(self.dst[self.src == i]).tolist()

    def csr_out(self):
        """``(indptr, nbrs)``: node i's out-neighbours are ``nbrs[indptr[i]:indptr[i+1]]``, ascending."""
        order = np.lexsort((self.dst, self.src))
        indptr = np.zeros(self.n + 1, np.int64)
        np.cumsum(np.bincount(self.src, minlength=self.n), out=indptr[1:])
        return indptr, self.dst[order]

    def undirected_edges(self) -> np.ndarray:
        """(m, 2) int64 array of the undirected edges (i < j), sorted."""
        a, b = np.minimum(self.src, self.dst), np.maximum(self.src, self.dst)
        return np.unique(np.stack([a, b], axis=1), axis=0).reshape(-1, 2)

    # --- the matrix and its spectrum -------------------------------------------
    @cached_property
    def W(self) -> np.ndarray:
        """The (n, n) float64 mixing matrix, ``x_i <- sum_j W[i, j] x_j`` (built once, on first use)."""
        W = np.diag(self.self_weight.astype(np.float64))
        np.add.at(W, (self.dst, self.src), self.weight)
        return W

    def dense(self) -> np.ndarray:
        """:attr:`W`, refused for a graph too large to hold densely.

        Raises:
            ValueError: n > DENSE_LIMIT.
        """
        if self.n > DENSE_LIMIT:
            raise ValueError(f"a dense {self.n} x {self.n} matrix is too large (limit {DENSE_LIMIT} nodes)")
        return self.W

    def eigenvalues(self) -> np.ndarray | None:
        """All eigenvalues of W (complex128, (n,)), or None when n is too large
        for a dense solver and W is not circulant. For a time-varying graph:
        those of step 0's matrix. The symmetric solver only where W equals
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
        W = self.W
        # eigvalsh reads one triangle only: right for a symmetric W, silently wrong otherwise (push-sum's
        # column-stochastic matrix on an irregular undirected graph is not symmetric, yet not "directed")
        return np.linalg.eigvalsh(W).astype(complex) if np.array_equal(W, W.T) else np.linalg.eigvals(W)

    def lambda2(self) -> float | None:
        """``|lambda_2(W)|``, the second-largest eigenvalue modulus (0 for n = 1;
        None if not computable: see :meth:`eigenvalues`)."""
        ev = self.eigenvalues()
        if ev is None:
            return None
        return float(np.sort(np.abs(ev))[::-1][1]) if self.n > 1 else 0.0

    def spectral_gap(self) -> float | None:
        """``1 - |lambda_2(W)|`` (for a time-varying graph, of step 0's matrix; None as :meth:`lambda2`)."""
        l2 = self.lambda2()
        return None if l2 is None else 1.0 - l2

    # --- checks and reports -----------------------------------------------------
    def check_connected(self) -> None:
        """Raise unless every node is reachable from node 0 along edges in
        either direction (a disconnected graph never averages).

        Raises:
            ValueError: naming the graph, the number of nodes reached, and a fix.
        """
        component = components(self.n, self.src, self.dst, "weak")
        reached = int((component == component[0]).sum())
        if reached < self.n:
            raise ValueError(f"topology {self.name} on {self.n} nodes is not connected (node 0 reaches "
                             f"{reached} of {self.n}): gossip would never reach the global mean; "
                             "use more edges (e.g. a larger radius) or another topology")

    def fingerprint(self) -> str:
        """A short hash of W (rounded to 12 digits), to compare across ranks."""
        return hashlib.sha1(np.round(self.W, 12).tobytes()).hexdigest()[:16]

    def describe(self) -> dict:
        """For summary.json: kind, P, degrees, spectral gap, directed, period."""
        degs = self.out_degree()
        return {"topology": self.name, "P": self.n, "max_degree": int(degs.max()), "mean_degree": float(np.mean(degs)),
                "spectral_gap": self.spectral_gap(), "directed": self.directed, "period": self.period}


def components(n: int, src: np.ndarray, dst: np.ndarray, connection: str) -> np.ndarray:
    """The component of each of ``n`` nodes (int32, shape (n,); equal labels: one component) of
    the graph with edges ``src[e] -> dst[e]`` (integer arrays, shape (E,)): ``connection`` "weak"
    (edges in either direction) or "strong" (each node reaches the other and back). SciPy's
    csgraph, O(nodes + edges): a breadth-first search one hop per round takes n / 2 rounds on a
    ring, seconds for the P = 1..1024 of a cost projection or a lab's 10,000 nodes.

    Raises:
        ValueError: ``connection`` is neither "weak" nor "strong" (SciPy's message)."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components
    edges = coo_matrix((np.ones(len(src)), (src, dst)), shape=(n, n))
    return connected_components(edges, directed=True, connection=connection)[1]


def second_eigenvalue_modulus(W: np.ndarray) -> float:
    """``|lambda_2|`` of a dense square matrix: the second-largest eigenvalue
    modulus (general solver), 0.0 for a 1 x 1 matrix."""
    if W.shape[0] == 1:
        return 0.0
    return float(np.sort(np.abs(np.linalg.eigvals(W)))[::-1][1])


def spectral_gap(W: np.ndarray) -> float:
    """``1 - |lambda_2|`` of a dense mixing matrix (eigenvalues by modulus,
    descending); 1.0 for P = 1. For a :class:`Topology`, use its method."""
    return 1.0 - second_eigenvalue_modulus(W)


# --- Metropolis-Hastings weights ---------------------------------------------------
def _metropolis_hastings(n: int, edges, name: str, fourier_shape=None, layout=None) -> Topology:
    """The graph on the undirected ``edges`` ((m, 2) ints; self-loops and
    repeats dropped) with weights ``1 / (1 + max(deg_i, deg_j))``; not checked
    for connectivity."""
    e = np.asarray(edges, np.int64).reshape(-1, 2)
    e = e[e[:, 0] != e[:, 1]]
    e = np.unique(np.sort(e, axis=1), axis=0)
    src = np.concatenate([e[:, 0], e[:, 1]])
    dst = np.concatenate([e[:, 1], e[:, 0]])
    deg = np.bincount(src, minlength=n)
    w = 1.0 / (1.0 + np.maximum(deg[src], deg[dst]))
    if n <= DENSE_LIMIT:
        # 1 - the row sums of the off-diagonal dense matrix: NumPy's (pairwise) summation order, the
        # bits the trainers' matrices have always had; a sparse sum differs in the last bit on some rows
        off = np.zeros((n, n))
        off[dst, src] = w
        self_w = 1.0 - off.sum(axis=1)
    else:  # no dense matrix: the same sums, in edge order
        self_w = 1.0 - np.bincount(dst, weights=w, minlength=n)
    return Topology(name, n, src, dst, w, self_w, fourier_shape=fourier_shape, layout=layout)


def _undirected(name: str, n: int, edges, fourier_shape=None, layout=None) -> Topology:
    """Metropolis-Hastings weights on ``edges``, checked to be connected."""
    top = _metropolis_hastings(n, edges, name, fourier_shape, layout)
    top.check_connected()
    return top


def metropolis_weights(adj: np.ndarray) -> np.ndarray:
    """Metropolis-Hastings mixing matrix (dense, (P, P) float64) of an undirected
    graph given by its symmetric 0/1 adjacency matrix (the diagonal is ignored):
    symmetric, doubly stochastic."""
    adj = (np.asarray(adj) > 0) & ~np.eye(len(adj), dtype=bool)
    return _metropolis_hastings(len(adj), np.argwhere(adj), "adjacency").W


# --- the graphs: builder(n, radius=None, seed=0) -----------------------------------
def ring(n: int, **_) -> Topology:
    """Each node with its two neighbours i-1 and i+1 (weights 1/3 each for n >= 3)."""
    i = np.arange(n)
    return _undirected("ring", n, np.stack([i, (i + 1) % n], 1), (n,))


def torus(n: int, **_) -> Topology:
    """A 2-D torus r x c with r c = n and r the largest divisor of n not above
    sqrt(n) (for a prime n, 1 x n: a ring, drawn on a circle)."""
    r = max(d for d in range(1, math.isqrt(n) + 1) if n % d == 0)
    c = n // r
    a, b = np.divmod(np.arange(n), c)
    edges = np.concatenate([np.stack([a * c + b, a * c + (b + 1) % c], 1),
                            np.stack([a * c + b, ((a + 1) % r) * c + b], 1)])
    grid = np.stack([b, -a], 1).astype(float) if r > 1 else None
    return _undirected("torus", n, edges, (r, c), grid)


def exponential(n: int, **_) -> Topology:
    """Static exponential graph: i linked with i +- 2^k (mod n) for 2^k < n
    (degree about 2 log2 n; Assran et al. 2019)."""
    i = np.arange(n)
    K = max(1, math.ceil(math.log2(n)))
    edges = np.concatenate([np.stack([i, (i + 2 ** k) % n], 1) for k in range(K)])
    return _undirected("exponential", n, edges, (n,))


def complete(n: int, **_) -> Topology:
    """Everyone with everyone, ``W = 11^T / n``: a gossip step equals the allreduce average.

    Raises:
        ValueError: n > DENSE_LIMIT (n (n - 1) edges).
    """
    if n > DENSE_LIMIT:
        raise ValueError(f"topology complete on {n} nodes has {n * (n - 1)} edges; use at most {DENSE_LIMIT} nodes")
    i, j = np.nonzero(~np.eye(n, dtype=bool))
    return Topology("complete", n, j.astype(np.int64), i.astype(np.int64), np.full(len(i), 1.0 / n),
                    np.full(n, 1.0 / n), fourier_shape=(n,))


def random_geometric(n: int, radius: float | None = None, seed: int = 0, **_) -> Topology:
    """Nodes at seeded uniform points of the unit square, linked when closer
    than ``radius`` (the same points on every rank: the seed fixes them). The
    default radius, ``1.5 sqrt(ln n / n)``, is above the connectivity threshold
    of random geometric graphs (Penrose 2003), so most seeds give a connected
    graph. Beyond DENSE_LIMIT nodes pairs are found cell by cell, so 10,000
    nodes take well under a second."""
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
    return _undirected("random-geometric", n, np.stack([i, j], 1), layout=pts)


def tree(n: int, seed: int = 0, **_) -> Topology:
    """A random recursive tree: node i >= 1 hangs under a uniformly chosen
    earlier node (seeded). Periodic gossip's per-period rate on a tree does not
    depend on the edge order (Yu et al.)."""
    parent = np.random.default_rng(seed).integers(0, np.maximum(np.arange(1, n), 1))
    return _undirected("tree", n, np.stack([parent, np.arange(1, n)], 1))


def directed_ring(n: int, **_) -> Topology:
    """Node i keeps 1/2 and sends 1/2 to i+1: ``W = (I + S)/2``, column
    stochastic, for push-sum (also row stochastic, so plain gossip works too)."""
    i = np.arange(n, dtype=np.int64)
    return Topology("directed-ring", n, i, (i + 1) % n, np.full(n, 0.5), np.full(n, 0.5), directed=n > 2,
                    fourier_shape=(n,))


def one_peer_exponential(n: int, **_) -> Topology:
    """Time-varying: at step t, ``x_i <- (x_i + x_{i - 2^(t mod log2 n)}) / 2``;
    node i sends half to i + 2^(t mod log2 n) and keeps half. n must be a
    power of two (then every log2 n steps the product of the W_t is exactly
    the average ``11^T / n``).

    Raises:
        ValueError: n not a power of two.
    """
    if n & (n - 1):
        raise ValueError(f"one-peer-exponential needs a power-of-two number of ranks, got {n}; "
                         "use exponential or ring, or run on 2, 4, 8, ... ranks (nodes)")
    L = max(1, int(math.log2(n)))
    i = np.arange(n, dtype=np.int64)

    def build(t: int) -> Topology:
        return Topology("one-peer-exponential", n, i, (i + 2 ** (t % L)) % n, np.full(n, 0.5), np.full(n, 0.5),
                        directed=n > 2, period=L, fourier_shape=(n,), _build=build)
    return build(0)


#: every graph of the library: name -> builder(n, radius=None, seed=0)
GRAPHS = {
    "ring": ring,
    "torus": torus,
    "exponential": exponential,
    "one-peer-exponential": one_peer_exponential,
    "complete": complete,
    "random-geometric": random_geometric,
    "directed-ring": directed_ring,
    "tree": tree,
}

#: the graphs the gossip trainers' ``topology`` option offers: all but ``tree``
#: (a lab graph, for periodic gossip)
TOPOLOGIES = {name: build for name, build in GRAPHS.items() if name != "tree"}


def make_topology(name: str, P: int, radius: float | None = None, seed: int = 0) -> Topology:
    """The graph ``name`` on ``P`` nodes (ranks). ``radius`` and ``seed`` are
    the random geometric graph's (``seed`` also the tree's); other graphs
    ignore them. On one node every graph is ``W = [[1]]``.

    Raises:
        ValueError: unknown name (valid ones listed), P < 1, a graph that is
            not connected, one-peer-exponential with P not a power of two, or
            complete on more than DENSE_LIMIT nodes.
    """
    if name not in GRAPHS:
        raise ValueError(f"unknown topology {name!r}; choose one of {', '.join(GRAPHS)}")
    if P < 1:
        raise ValueError(f"a topology needs P >= 1 ranks, got {P}")
    if P == 1:
        none = np.zeros(0, np.int64)
        return Topology(name, 1, none, none, np.zeros(0), np.ones(1))
    return GRAPHS[name](P, radius=radius, seed=seed)


def check_same_on_all_ranks(topology: Topology, comm) -> None:
    """Raise on every rank unless every rank of ``comm`` built the same matrix
    (one small allgather of fingerprints).

    Raises:
        ValueError: naming the ranks whose graph differs from rank 0's.
    """
    prints = comm.allgather(topology.fingerprint())
    bad = [r for r, f in enumerate(prints) if f != prints[0]]
    if bad:
        raise ValueError(f"ranks {bad} built a different {topology.name} graph from rank 0's; every rank must "
                         "build the topology from the same options (and seed)")
