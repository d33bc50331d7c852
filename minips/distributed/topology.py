"""Communication graphs for decentralized (gossip) training: who talks to whom,
with which weights. NumPy only, no MPI: every rank builds the same graph from
the same arguments (:func:`check_same_on_all_ranks` verifies it).

A :class:`Topology` holds a P x P **mixing matrix** ``W`` (float64): one gossip
step replaces rank i's vector by ``x_i <- sum_j W_ij x_j``. ``W_ij > 0`` only
when j sends to i (j is an *in-neighbour* of i) or j = i.

- Undirected graphs get **Metropolis-Hastings** weights (Xiao & Boyd, "Fast
  linear iterations for distributed averaging", 2004):
  ``W_ij = 1 / (1 + max(deg_i, deg_j))`` on each edge, ``W_ii = 1 - sum_j W_ij``.
  W is symmetric and doubly stochastic, so a gossip step preserves the mean of
  the x_i, and repeated steps converge to it at the rate ``|lambda_2(W)|``.
- ``complete`` uses ``W = 11^T / P``: one gossip step *is* the allreduce average.
- ``directed-ring`` (push-sum, Kempe et al. 2003): rank i keeps 1/2 and sends 1/2
  to i+1: ``W = (I + S)/2`` is column stochastic (a push-sum step preserves the
  sum of the x_i and of the weights).
- ``one-peer-exponential`` is time-varying (Assran et al., ICML 2019; Ying et
  al., NeurIPS 2021): at step t rank i averages with the single peer at offset
  ``2^(t mod log2 P)``, ``W_t = (I + S_t)/2`` (P must be a power of two).

The **spectral gap** ``1 - |lambda_2|`` (``lambda_2`` the second-largest
eigenvalue in modulus) says how fast gossip mixes: 1 for the complete graph,
about ``4 pi^2 / (3 P^2)`` for a ring with weights 1/3 (its eigenvalues are
``1/3 + 2/3 cos(2 pi k / P)``).
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field, replace

import numpy as np

__all__ = ["Topology", "TOPOLOGIES", "make_topology", "metropolis_weights", "spectral_gap",
           "check_same_on_all_ranks"]


@dataclass(frozen=True)
class Topology:
    """A communication graph and its mixing matrix.

    Attributes:
        name: the kind (a key of :data:`TOPOLOGIES`).
        W: (P, P) float64 mixing matrix; ``x_i <- sum_j W[i, j] x_j``.
        directed: True when some edge goes one way only (push-sum graphs).
        period: 0 for a static graph; for a time-varying one, the number of
            distinct matrices it cycles through (:meth:`at` gives step t's).
        layout: (P, 2) float64 positions that show the graph's shape, or None
            (then a drawing puts the ranks on a circle): the torus's grid
            (column, -row), the random geometric graph's points in the unit square.
    """
    name: str
    W: np.ndarray
    directed: bool = False
    period: int = 0
    _build: object = field(default=None, repr=False, compare=False)
    layout: np.ndarray | None = field(default=None, repr=False, compare=False)

    @property
    def P(self) -> int:
        return self.W.shape[0]

    def at(self, t: int) -> "Topology":
        """The graph of step ``t`` (itself for a static graph)."""
        return self if not self.period else self._build(t % self.period)

    def in_neighbors(self, i: int) -> list[int]:
        """Ranks j != i whose values rank i mixes in (``W[i, j] > 0``), ascending."""
        return [int(j) for j in np.flatnonzero(self.W[i] > 0) if j != i]

    def out_neighbors(self, i: int) -> list[int]:
        """Ranks j != i that mix in rank i's value (``W[j, i] > 0``), ascending."""
        return [int(j) for j in np.flatnonzero(self.W[:, i] > 0) if j != i]

    def degree(self, i: int) -> int:
        """Messages rank i sends per gossip step (its out-degree)."""
        return len(self.out_neighbors(i))

    def spectral_gap(self) -> float:
        """``1 - |lambda_2(W)|`` (for a time-varying graph, of step 0's matrix)."""
        return spectral_gap(self.W)

    def fingerprint(self) -> str:
        """A short hash of W (rounded to 12 digits), to compare across ranks."""
        return hashlib.sha1(np.round(self.W, 12).tobytes()).hexdigest()[:16]

    def describe(self) -> dict:
        """For summary.json: kind, P, degrees, spectral gap, directed, period."""
        degs = [self.degree(i) for i in range(self.P)]
        return {"topology": self.name, "P": self.P, "max_degree": max(degs), "mean_degree": float(np.mean(degs)),
                "spectral_gap": self.spectral_gap(), "directed": self.directed, "period": self.period}


def spectral_gap(W: np.ndarray) -> float:
    """``1 - |lambda_2|`` of a mixing matrix (eigenvalues by modulus, descending);
    1.0 for P = 1."""
    if W.shape[0] == 1:
        return 1.0
    mods = np.sort(np.abs(np.linalg.eigvals(W)))[::-1]
    return float(1.0 - mods[1])


def metropolis_weights(adj: np.ndarray) -> np.ndarray:
    """Metropolis-Hastings mixing matrix of an undirected graph given by its
    symmetric 0/1 adjacency matrix (no self-loops): symmetric, doubly stochastic."""
    adj = (adj > 0) & ~np.eye(len(adj), dtype=bool)
    deg = adj.sum(axis=1)
    W = np.where(adj, 1.0 / (1.0 + np.maximum.outer(deg, deg)), 0.0)
    W[np.diag_indices_from(W)] = 1.0 - W.sum(axis=1)
    return W


def _connected(adj: np.ndarray) -> bool:
    """Whether the undirected graph reaches every node from node 0 (breadth first)."""
    seen, frontier = {0}, [0]
    while frontier:
        nxt = []
        for i in frontier:
            for j in np.flatnonzero(adj[i] | adj[:, i]):
                if int(j) not in seen:
                    seen.add(int(j))
                    nxt.append(int(j))
        frontier = nxt
    return len(seen) == len(adj)


def _undirected(name: str, P: int, edges) -> Topology:
    adj = np.zeros((P, P), dtype=bool)
    for i, j in edges:
        if i != j:
            adj[i, j] = adj[j, i] = True
    if not _connected(adj):
        raise ValueError(f"topology {name} on {P} ranks is not connected: gossip would never average "
                         "all ranks (use more edges, e.g. a larger radius, or another topology)")
    return Topology(name, metropolis_weights(adj))


def ring(P: int) -> Topology:
    """Each rank with its two neighbours i-1 and i+1 (weights 1/3 each for P >= 3)."""
    return _undirected("ring", P, [(i, (i + 1) % P) for i in range(P)])


def torus(P: int) -> Topology:
    """A 2-D torus r x c with r c = P and r the largest divisor of P not above
    sqrt(P) (for a prime P, 1 x P: a ring)."""
    r = max(d for d in range(1, int(math.isqrt(P)) + 1) if P % d == 0)
    c = P // r
    edges = []
    for a in range(r):
        for b in range(c):
            i = a * c + b
            edges += [(i, a * c + (b + 1) % c), (i, ((a + 1) % r) * c + b)]
    grid = np.array([(i % c, -(i // c)) for i in range(P)], float) if r > 1 else None  # r = 1: a ring
    return replace(_undirected("torus", P, edges), layout=grid)


def exponential(P: int) -> Topology:
    """Static exponential graph: i linked with i +- 2^k (mod P) for 2^k < P
    (degree about 2 log2 P; Assran et al. 2019)."""
    edges = [(i, (i + 2 ** k) % P) for i in range(P) for k in range(max(1, math.ceil(math.log2(P))))]
    return _undirected("exponential", P, edges)


def complete(P: int) -> Topology:
    """Everyone with everyone, ``W = 11^T / P``: a gossip step equals the allreduce average."""
    return Topology("complete", np.full((P, P), 1.0 / P))


def random_geometric(P: int, radius: float | None = None, seed: int = 0) -> Topology:
    """Ranks at seeded uniform points of the unit square, linked when closer than
    ``radius`` (the same points on every rank: the seed fixes them). The default
    radius, ``1.5 sqrt(ln P / P)``, is above the connectivity threshold of
    random geometric graphs (Penrose 2003), so most seeds give a connected graph."""
    if radius is None:
        radius = min(1.5, 1.5 * math.sqrt(max(math.log(P), 1.0) / P))
    pts = np.random.default_rng(seed).random((P, 2))
    d = np.linalg.norm(pts[:, None] - pts[None], axis=-1)
    top = _undirected("random-geometric", P, [(i, j) for i in range(P) for j in range(i + 1, P)
                                               if d[i, j] < radius])
    return replace(top, layout=pts)


def directed_ring(P: int) -> Topology:
    """Rank i keeps 1/2 and sends 1/2 to i+1: ``W = (I + S)/2``, column
    stochastic, for push-sum (also row stochastic, so plain gossip works too)."""
    W = np.eye(P) / 2
    for i in range(P):
        W[(i + 1) % P, i] += 0.5
    return Topology("directed-ring", W, directed=P > 2)


def one_peer_exponential(P: int) -> Topology:
    """Time-varying: at step t, ``x_i <- (x_i + x_{i - 2^(t mod log2 P)}) / 2``;
    rank i sends to i + 2^(t mod log2 P). P must be a power of two (then every
    log2 P steps the product of the W_t is exactly the average)."""
    if P & (P - 1):
        raise ValueError(f"one-peer-exponential needs a power-of-two number of ranks, got {P}; "
                         "use exponential or ring, or run on 2, 4, 8, ... ranks")
    L = max(1, int(math.log2(P)))

    def build(t: int) -> Topology:
        off = 2 ** (t % L)
        W = np.eye(P) / 2
        for i in range(P):
            W[i, (i - off) % P] += 0.5
        return Topology("one-peer-exponential", W, directed=P > 2, period=L, _build=build)
    return build(0) if P > 1 else complete(1)


#: topology name -> builder(P, **options)
TOPOLOGIES = {
    "ring": ring,
    "torus": torus,
    "exponential": exponential,
    "one-peer-exponential": one_peer_exponential,
    "complete": complete,
    "random-geometric": random_geometric,
    "directed-ring": directed_ring,
}


def make_topology(name: str, P: int, **options) -> Topology:
    """The topology ``name`` on ``P`` ranks (options: ``radius``, ``seed`` for
    random-geometric).

    Raises:
        ValueError: unknown name (valid ones listed), P < 1, a graph that is
            not connected, or one-peer-exponential with P not a power of two.
    """
    if name not in TOPOLOGIES:
        raise ValueError(f"unknown topology {name!r}; choose one of {', '.join(TOPOLOGIES)}")
    if P < 1:
        raise ValueError(f"a topology needs P >= 1 ranks, got {P}")
    if P == 1:
        return Topology(name, np.ones((1, 1)))
    return TOPOLOGIES[name](P, **options)


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
