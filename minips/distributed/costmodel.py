"""Alpha-beta (latency-bandwidth) cost model of collective communication.

Long because one job: the time model of every communication primitive, and of a
step built from them; most of the length is the derivation of each formula, kept
in the docstrings beside the code that evaluates it.

Sending ``n`` bytes point to point costs ``alpha + n * beta`` seconds (Hockney
1994): ``alpha`` is the latency (s), ``beta`` the inverse bandwidth (s/byte).
A ring allreduce of ``n`` bytes over ``P`` ranks is a reduce-scatter followed
by an allgather, each ``P-1`` rounds of ``n/P`` bytes (Thakur, Rabenseifner &
Gropp, "Optimization of Collective Communication Operations in MPICH", IJHPCA
2005; Patarasuk & Yuan 2009)::

    T_ring(n, P) = 2 (P-1) alpha + 2 (P-1)/P * n * beta      (+ reduction arithmetic, ignored)

The other primitives of :mod:`minips.distributed.comm` have their own times
(same paper for the collectives; one message is Hockney's model):

- ring allgather(v) of blocks ``n_0..n_{P-1}`` bytes: ``P-1`` rounds in lock
  step, each as long as its largest message, and every block is on the wire in
  every round, so ``(P-1) (alpha + max_j n_j beta)`` (equal blocks ``n/P``:
  ``(P-1) alpha + (P-1)/P n beta``, Thakur et al.'s ring allgather);
- neighbour exchange on a graph: ``d (alpha + n beta)``, ``d`` = the larger of
  the rank's remote in- and out-degree (one full-duplex port: sends go one
  after another, receives too, the two directions overlap);
- one message (send/recv, or a pairwise exchange on a full-duplex link):
  ``alpha + n beta``;
- broadcast by binomial tree: ``ceil(log2 P) (alpha + n beta)``.

Many ranks per node (R ranks on each of N = ceil(P/R) nodes, ranks placed
in blocks: node k holds ranks kR..kR+R-1), with the node's memory as a second
"network" (:class:`SharedMemoryModel`: a latency ``alpha_s`` per node barrier and
a bandwidth ``bw`` that the node's ranks share):

- flat ring over all P ranks (:func:`flat_allreduce_time`): each of the
  ``2 (P-1)`` steps moves ``n/P`` bytes on every hop at once; per node, one
  hop leaves the node (``alpha + (n/P) beta``, when N > 1) and the others
  (``R-1``, or R when everything is on one node) go through its memory,
  sharing it (``alpha_s + h (n/P) / bw``); a step lasts as long as the slower.
  With R = 1 this is the plain ring above;
- hierarchical (:func:`hierarchical_allreduce_time`): the node reduction and
  the broadcast back through shared memory, three passes over the node's
  ``R n`` bytes (copy in, sum, copy out) and three barriers,
  ``3 alpha_s + 3 R n / bw`` (0 when R = 1), plus a ring allreduce among the N
  leaders, ``T_ring(n, N)`` on the inter-node network.

The flat ring pays ``2 (P-1)`` latencies, the hierarchical one ``2 (N-1)``
plus three barriers: with 96 ranks per node that is the difference between
24.6 ms and 0.25 ms of latency per allreduce at 128 nodes on a 1 us network.
Network emulation (:class:`~minips.distributed.comm.Comm`) charges only the
inter-node part (the shared memory is real): ``T_ring(n, P)`` for the flat
ring when N > 1 (0 on one node), ``T_ring(n, N)`` for the hierarchical one.

Bytes *sent* by one rank under the same models (what ``Comm.bytes_sent``
counts) are given by the ``*_bytes_sent`` functions below.

Interconnect presets are nominal figures, not measurements: the bandwidth is
the link's signalling rate (IEEE 802.3 for Ethernet; the InfiniBand Trade
Association roadmap for FDR/EDR/HDR: 4x lanes at 14.0625 / 25.78125 / 53.125
Gb/s, 64b/66b coding), and the latency a typical MPI ping-pong small-message
latency for that class of network (about 50 us for MPI over TCP on 1 GbE, about
10 us on 10 GbE, about 1 us on InfiniBand, as OSU micro-benchmark reports for
such networks show). Use ``alpha=..,beta=..`` or fit your own with
``python -m minips bench comm``.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

__all__ = ["ALLREDUCE_PATHS", "NETWORKS", "SHARED_MEMORY", "Fit", "Interconnect", "StepProfile", "allreduce_time",
           "check_interference", "rabenseifner_allreduce_time", "NetworkModel", "SharedMemoryModel",
           "flat_allreduce_time",
           "hierarchical_allreduce_time", "node_reduction_time", "binomial_bcast_bytes_sent", "binomial_bcast_time",
           "fit_ring_allreduce",
           "message_time", "neighbor_exchange_time", "parse_network", "ring_allgatherv_bytes_sent",
           "ring_allgatherv_time", "ring_allreduce_bytes_sent", "ring_allreduce_time"]


def ring_allreduce_time(nbytes: float, P: int, alpha: float, beta: float) -> float:
    """Seconds for a ring allreduce of ``nbytes`` over ``P`` ranks (0 for P = 1).

    Raises:
        ValueError: P < 1 or negative sizes/parameters.
    """
    check_allreduce_args(nbytes, P, alpha, beta)
    if P == 1:
        return 0.0
    return 2 * (P - 1) * alpha + 2 * (P - 1) / P * nbytes * beta


def check_allreduce_args(nbytes: float, P: int, alpha: float, beta: float) -> None:
    """Raise ValueError unless P >= 1 and the size and the parameters are >= 0
    (shared by every allreduce time model)."""
    if P < 1:
        raise ValueError(f"P must be >= 1, got {P}")
    if nbytes < 0 or alpha < 0 or beta < 0:
        raise ValueError("nbytes, alpha and beta must be >= 0")


def _check_link(alpha: float, beta: float, *sizes: float) -> None:
    if alpha < 0 or beta < 0 or any(n < 0 for n in sizes):
        raise ValueError("sizes (bytes), alpha and beta must be >= 0")


def ring_allgatherv_time(block_bytes, alpha: float, beta: float) -> float:
    """Seconds for a ring allgather(v) where rank j contributes ``block_bytes[j]``
    bytes (one entry per rank, so P = ``len(block_bytes)``; 0 for P = 1).

    ``P-1`` rounds in lock step; in each round every block is forwarded by some
    rank, so each round lasts as long as the largest block:
    ``(P-1) (alpha + max_j n_j beta)``. Equal blocks of ``n/P`` give Thakur,
    Rabenseifner & Gropp's (2005) ring allgather ``(P-1) alpha + (P-1)/P n beta``.

    Raises:
        ValueError: no blocks, or a negative size/parameter.
    """
    blocks = [float(b) for b in block_bytes]
    if not blocks:
        raise ValueError("ring_allgatherv_time needs one block size per rank (got none)")
    _check_link(alpha, beta, *blocks)
    P = len(blocks)
    return 0.0 if P == 1 else (P - 1) * (alpha + max(blocks) * beta)


def neighbor_exchange_time(nbytes: float, degree: int, alpha: float, beta: float) -> float:
    """Seconds for a neighbour allgather of ``nbytes`` per message with ``degree``
    remote neighbours: ``degree (alpha + nbytes beta)``.

    ``degree`` is the larger of the rank's remote in- and out-degree (self-loops
    are local copies): one full-duplex port sends its messages one after
    another and receives likewise, the two directions overlapping.

    Raises:
        ValueError: negative degree, size or parameter.
    """
    _check_link(alpha, beta, nbytes, degree)
    return degree * (alpha + nbytes * beta)


def message_time(nbytes: float, alpha: float, beta: float) -> float:
    """Seconds for one point-to-point message of ``nbytes``: ``alpha + nbytes beta``
    (Hockney 1994). A pairwise exchange on a full-duplex link costs the same.

    Raises:
        ValueError: negative size or parameter.
    """
    _check_link(alpha, beta, nbytes)
    return alpha + nbytes * beta


def binomial_bcast_time(nbytes: float, P: int, alpha: float, beta: float) -> float:
    """Seconds for a binomial-tree broadcast of ``nbytes`` to ``P`` ranks:
    ``ceil(log2 P) (alpha + nbytes beta)`` (Thakur, Rabenseifner & Gropp 2005;
    0 for P = 1).

    Raises:
        ValueError: P < 1, or a negative size/parameter.
    """
    check_allreduce_args(nbytes, P, alpha, beta)
    return math.ceil(math.log2(P)) * (alpha + nbytes * beta)


def ring_allreduce_bytes_sent(nbytes: int, P: int) -> int:
    """Bytes one rank sends in a ring allreduce of ``nbytes``: ``2 (P-1)/P n``,
    rounded down to whole bytes (0 for P = 1)."""
    return 2 * (P - 1) * int(nbytes) // P


def ring_allgatherv_bytes_sent(block_bytes, rank: int) -> int:
    """Bytes ``rank`` sends in a ring allgather(v) with blocks ``block_bytes``
    (bytes, one per rank). Rank r sends to r+1 and receives from r-1; over the
    P-1 rounds it forwards every block except the one of its successor r+1,
    which is where the ring ends: ``sum(n) - n_{(r+1) mod P}`` (0 for P = 1).
    Summed over ranks this is ``(P-1) sum(n)``: every block reaches P-1 ranks."""
    blocks = [int(b) for b in block_bytes]
    P = len(blocks)
    return 0 if P == 1 else sum(blocks) - blocks[(rank + 1) % P]


def binomial_bcast_bytes_sent(nbytes: int, P: int, rank: int, root: int = 0) -> int:
    """Bytes ``rank`` sends in a binomial-tree broadcast of ``nbytes`` from
    ``root`` (MPICH's tree): with ``v = (rank - root) mod P``, rank v sends to
    ``v + m`` for every power of two ``m`` below v's lowest set bit (below P
    for the root) with ``v + m < P``. The root sends ``ceil(log2 P)`` messages,
    leaves none; summed over ranks: ``(P-1) n``."""
    v = (rank - root) % P
    low = v & -v if v else P  # lowest set bit of v; the root may use every m < P
    children, m = 0, 1
    while m < low and v + m < P:
        children, m = children + 1, m * 2
    return children * int(nbytes)


@dataclass(frozen=True)
class NetworkModel:
    """An interconnect as (alpha seconds, beta seconds per byte) plus a name."""
    alpha: float
    beta: float
    name: str = "custom"

    def allreduce_time(self, nbytes: float, P: int) -> float:
        """Ring-allreduce seconds for ``nbytes`` over ``P`` ranks."""
        return ring_allreduce_time(nbytes, P, self.alpha, self.beta)

    def allgatherv_time(self, block_bytes) -> float:
        """Ring-allgather(v) seconds for per-rank blocks of ``block_bytes`` bytes
        (see :func:`ring_allgatherv_time`)."""
        return ring_allgatherv_time(block_bytes, self.alpha, self.beta)

    def neighbor_time(self, nbytes: float, degree: int) -> float:
        """Neighbour-exchange seconds, ``degree (alpha + nbytes beta)``
        (see :func:`neighbor_exchange_time`)."""
        return neighbor_exchange_time(nbytes, degree, self.alpha, self.beta)

    def message_time(self, nbytes: float) -> float:
        """Seconds for one message of ``nbytes``, ``alpha + nbytes beta``."""
        return message_time(nbytes, self.alpha, self.beta)

    def bcast_time(self, nbytes: float, P: int) -> float:
        """Binomial-tree broadcast seconds, ``ceil(log2 P) (alpha + nbytes beta)``."""
        return binomial_bcast_time(nbytes, P, self.alpha, self.beta)

    @property
    def bandwidth_gbps(self) -> float:
        """Bandwidth in Gbit/s (1e9 bits per second)."""
        return math.inf if self.beta == 0 else 8 / self.beta / 1e9

    def __str__(self):
        return (f"{self.name} (alpha={self.alpha * 1e6:.3g} us, "
                f"bandwidth={self.bandwidth_gbps:.3g} Gb/s)")


@dataclass(frozen=True)
class SharedMemoryModel:
    """A node's memory as the medium of its ranks' communication.

    Attributes:
        alpha: seconds per node barrier (the latency of one shared-memory step).
        bandwidth: bytes per second of the node's memory system, shared by all
            its ranks (a STREAM-like figure of the whole node).
    """
    alpha: float = 1e-6
    bandwidth: float = 100e9
    name: str = "shared memory"

    def __post_init__(self):
        if self.alpha < 0 or self.bandwidth <= 0:
            raise ValueError(f"shared memory: alpha must be >= 0 and bandwidth > 0, got alpha={self.alpha}, "
                             f"bandwidth={self.bandwidth}")

    def __str__(self):
        return f"{self.name} (barrier {self.alpha * 1e6:.3g} us, node bandwidth {self.bandwidth / 1e9:.3g} GB/s)"


#: The default intra-node model: an ASSUMPTION (1 us per barrier, 100 GB/s of memory
#: bandwidth per node, the order of a two-socket server), not a measurement; pass your own.
SHARED_MEMORY = SharedMemoryModel()


def _nodes(P: int, R: int) -> int:
    if P < 1 or R < 1:
        raise ValueError(f"P and ranks per node must be >= 1, got P={P}, ranks_per_node={R}")
    return -(-P // R)


def node_reduction_time(nbytes: float, R: int, shm: SharedMemoryModel = SHARED_MEMORY) -> float:
    """Seconds of the node stages of a hierarchical allreduce of ``nbytes`` on a
    node of ``R`` ranks: ``3 alpha_s + 3 R n / bw`` (three barriers; copy in,
    sum and copy out each move the node's ``R n`` bytes); 0 for R = 1.

    Raises:
        ValueError: R < 1 or a negative size.
    """
    if R < 1 or nbytes < 0:
        raise ValueError(f"ranks per node must be >= 1 and nbytes >= 0, got R={R}, nbytes={nbytes}")
    return 0.0 if R == 1 else 3 * shm.alpha + 3 * R * nbytes / shm.bandwidth


def hierarchical_allreduce_time(nbytes: float, P: int, ranks_per_node: int, net: NetworkModel,
                                shm: SharedMemoryModel = SHARED_MEMORY) -> float:
    """Seconds of a hierarchical allreduce of ``nbytes`` over ``P`` ranks,
    ``ranks_per_node`` R per node: :func:`node_reduction_time` on a node of
    ``min(R, P)`` ranks plus a ring allreduce among the ``ceil(P/R)`` leaders on
    ``net``. 0 for P = 1.

    Raises:
        ValueError: P or R < 1, or negative sizes/parameters.
    """
    N = _nodes(P, ranks_per_node)
    if P == 1:
        return 0.0
    return node_reduction_time(nbytes, min(ranks_per_node, P), shm) + ring_allreduce_time(nbytes, N, net.alpha,
                                                                                            net.beta)


def flat_allreduce_time(nbytes: float, P: int, ranks_per_node: int, net: NetworkModel,
                        shm: SharedMemoryModel = SHARED_MEMORY) -> float:
    """Seconds of a flat ring allreduce of ``nbytes`` over ``P`` ranks placed
    ``ranks_per_node`` R per node in blocks: ``2 (P-1)`` steps, each as long as
    the slower of the node's inter-node hop ``alpha + (n/P) beta`` (if there is
    more than one node) and its intra-node hops sharing the node's memory,
    ``alpha_s + h (n/P) / bw`` with ``h = R-1`` hops (R on a single node).
    With R = 1 this is :func:`ring_allreduce_time`. 0 for P = 1.

    Raises:
        ValueError: P or R < 1, or negative sizes/parameters.
    """
    N = _nodes(P, ranks_per_node)
    check_allreduce_args(nbytes, P, net.alpha, net.beta)
    if P == 1:
        return 0.0
    R = min(ranks_per_node, P)
    chunk = nbytes / P
    step = 0.0
    if N > 1:
        step = net.alpha + chunk * net.beta
    if R > 1:
        hops = R - 1 if N > 1 else R
        step = max(step, shm.alpha + hops * chunk / shm.bandwidth)
    return 2 * (P - 1) * step


def _gbit(g: float) -> float:
    """beta (s/byte) for a link of ``g`` Gbit/s."""
    return 8 / (g * 1e9)


NETWORKS = {
    "1gbe": NetworkModel(50e-6, _gbit(1.0), "1 GbE"),
    "10gbe": NetworkModel(10e-6, _gbit(10.0), "10 GbE"),
    "25gbe": NetworkModel(5e-6, _gbit(25.0), "25 GbE"),
    "ib-fdr": NetworkModel(1.0e-6, _gbit(4 * 14.0625 * 64 / 66), "InfiniBand FDR 4x"),
    "ib-edr": NetworkModel(1.0e-6, _gbit(4 * 25.78125 * 64 / 66), "InfiniBand EDR 4x"),
    "ib-hdr": NetworkModel(1.0e-6, _gbit(4 * 53.125 * 64 / 66), "InfiniBand HDR 4x"),
}


def parse_network(spec) -> NetworkModel:
    """A :class:`NetworkModel` from a preset name (``1gbe``, ``10gbe``, ``25gbe``,
    ``ib-fdr``, ``ib-edr``, ``ib-hdr``), a string ``alpha=5e-5,beta=8e-9``
    (seconds, seconds per byte), or a NetworkModel (returned as is).

    Raises:
        ValueError: unknown name or malformed string (the valid forms are listed).
    """
    if isinstance(spec, NetworkModel):
        return spec
    s = str(spec).strip().lower()
    if s in NETWORKS:
        return NETWORKS[s]
    m = re.fullmatch(r"alpha=([0-9.eE+-]+),\s*beta=([0-9.eE+-]+)", s)
    if m:
        try:
            a, b = float(m.group(1)), float(m.group(2))
        except ValueError:
            m = None
        else:
            if a < 0 or b < 0:
                raise ValueError(f"network {spec!r}: alpha and beta must be >= 0")
            return NetworkModel(a, b, f"alpha={a:g},beta={b:g}")
    raise ValueError(f"unknown network {spec!r}; use one of {', '.join(NETWORKS)} "
                     "or 'alpha=SECONDS,beta=SECONDS_PER_BYTE'")


@dataclass(frozen=True)
class Fit:
    """Result of :func:`fit_ring_allreduce`: the model plus its quality.

    Attributes:
        model: the fitted :class:`NetworkModel`.
        r2: coefficient of determination of the fit on the points (1 = perfect).
        max_rel_error: largest ``|predicted - measured| / measured`` over the points.
        points: number of points used.
    """
    model: NetworkModel
    r2: float
    max_rel_error: float
    points: int


def fit_ring_allreduce(nbytes, seconds, P: int, weights: str = "relative") -> Fit:
    """Fit alpha and beta of the ring model ``T = 2(P-1) alpha + 2(P-1)/P n beta``
    to measured allreduce times by linear least squares.

    Args:
        nbytes: message sizes in bytes (sequence of >= 2 distinct values).
        seconds: measured times, same length.
        P: ranks (>= 2).
        weights: ``"relative"`` minimises relative errors (each point divided by
            its time, so 8-byte latencies count as much as 64 MB transfers), or
            ``"absolute"``.

    Returns:
        A :class:`Fit`; negative estimates are clipped to 0.

    Raises:
        ValueError: P < 2, mismatched lengths, or fewer than two distinct sizes.
    """
    import numpy as np

    n = np.asarray(nbytes, dtype=np.float64)
    t = np.asarray(seconds, dtype=np.float64)
    if P < 2:
        raise ValueError("fitting a ring allreduce needs P >= 2 ranks (with one rank there is no communication)")
    if n.shape != t.shape or len(np.unique(n)) < 2:
        raise ValueError("need matching sizes and times with at least two distinct sizes")
    A = np.stack([np.full_like(n, 2 * (P - 1)), 2 * (P - 1) / P * n], axis=1)
    w = 1 / t if weights == "relative" else np.ones_like(t)
    coef, *_ = np.linalg.lstsq(A * w[:, None], t * w, rcond=None)
    alpha, beta = (max(0.0, float(c)) for c in coef)
    pred = A @ np.array([alpha, beta])
    ss_res = float(((t - pred) ** 2).sum())
    ss_tot = float(((t - t.mean()) ** 2).sum()) or 1.0
    return Fit(NetworkModel(alpha, beta, "fitted"), 1 - ss_res / ss_tot,
               float(np.max(np.abs(pred - t) / t)), len(t))


# --- what a projection feeds an algorithm's cost model (the labs' projection builds on it) ---
@dataclass(frozen=True, init=False)
class StepProfile:
    """What one node spends per training step, measured without communication.

    Attributes (seconds per step unless stated):
        forward, backward: the compute phases.
        update: the optimizer.
        other: the rest of the iteration (data slicing, logging).
        grad_bytes: bytes of the gradient allreduced each step (4 x parameters).
        extras: what an algorithm's cost model reads beyond these, by name
            (each registered algorithm declares its own in ``PROFILE_EXTRAS``
            and computes them with ``profile_extras``; e.g. a predictor's
            seconds per step, bucket sizes, the layers' shapes). Given as a
            dict or as further keywords: ``StepProfile(f, b, grad_bytes=n, shapes=...)``.

    Raises:
        ValueError: a negative time. (An extra that no registered algorithm
            reads is refused where a cost model is asked for a time:
            :func:`minips.distributed.algorithms.step_time`.)
    """
    forward: float
    backward: float
    update: float = 0.0
    other: float = 0.0
    grad_bytes: float = 0.0
    extras: dict = field(default_factory=dict)

    def __init__(self, forward: float, backward: float, update: float = 0.0, other: float = 0.0,
                 grad_bytes: float = 0.0, extras: dict | None = None, **more):
        for name, value in (("forward", forward), ("backward", backward), ("update", update), ("other", other),
                            ("grad_bytes", grad_bytes), ("extras", {**(extras or {}), **more})):
            object.__setattr__(self, name, value)
        for name in ("forward", "backward", "update", "other", "grad_bytes"):
            if getattr(self, name) < 0:
                raise ValueError(f"StepProfile.{name} must be >= 0, got {getattr(self, name)}")

    @property
    def compute(self) -> float:
        """Seconds of forward, backward, update and other (not communication,
        not an algorithm's own extras)."""
        return self.forward + self.backward + self.update + self.other

    @classmethod
    def from_summary(cls, summary: dict, grad_bytes: float, include_other: bool = True,
                     extras: dict | None = None) -> "StepProfile":
        """From a ``summary.json`` of ``train`` (its ``time_breakdown`` and
        ``step_time_s``); ``other`` = step time minus the phases, minus wait
        and post (so a summary from a multi-rank run gives its compute only);
        ``extras`` as the algorithm's ``profile_extras`` gives them."""
        b = summary["time_breakdown"]
        phases = sum(b.values())
        other = max(0.0, summary["step_time_s"] - phases) if include_other else 0.0
        return cls(forward=b["forward"], backward=b["backward"], update=b["update"], other=other,
                   grad_bytes=float(grad_bytes), extras=extras)


def rabenseifner_allreduce_time(nbytes: float, P: int, alpha: float, beta: float) -> float:
    """Seconds for Rabenseifner's allreduce (recursive-halving reduce-scatter +
    recursive-doubling allgather) for a power-of-two ``P``:
    ``2 log2(P) alpha + 2 (P-1)/P n beta`` (Thakur, Rabenseifner & Gropp 2005;
    non-powers of two pay an extra step, ignored here). 0 for P = 1.

    Raises:
        ValueError: P < 1 or negative sizes/parameters.
    """
    check_allreduce_args(nbytes, P, alpha, beta)
    if P == 1:
        return 0.0
    return 2 * math.log2(P) * alpha + 2 * (P - 1) / P * nbytes * beta


def allreduce_time(nbytes: float, P: int, net, algorithm: str = "ring") -> float:
    """Allreduce seconds of ``nbytes`` over ``P`` nodes on ``net`` (a
    :class:`NetworkModel` or a name/``alpha=..,beta=..`` string);
    ``algorithm`` is ``ring`` or ``rabenseifner``.

    Raises:
        ValueError: unknown algorithm or network.
    """
    net = parse_network(net)
    if algorithm == "ring":
        return ring_allreduce_time(nbytes, P, net.alpha, net.beta)
    if algorithm == "rabenseifner":
        return rabenseifner_allreduce_time(nbytes, P, net.alpha, net.beta)
    raise ValueError(f"unknown allreduce algorithm {algorithm!r}; use ring or rabenseifner")


def check_interference(interference: float) -> None:
    """Refuse an interference phi outside [0, 1] (assumption 4 of the projection).

    Raises:
        ValueError: phi < 0 or phi > 1.
    """
    if not 0 <= interference <= 1:
        raise ValueError(f"interference must be in [0, 1] (0 = offloaded, 1 = on the compute cores), "
                         f"got {interference}")


ALLREDUCE_PATHS = ("flat", "hierarchical")


class Interconnect:
    """The alpha-beta network an algorithm's cost model sees: ``allreduce_time``
    by the chosen allreduce algorithm (and, with ``ranks_per_node`` R > 1, the
    flat or hierarchical path over nodes of R ranks), every other primitive as
    the :class:`NetworkModel` models it."""

    def __init__(self, net: NetworkModel, algorithm: str, ranks_per_node: int = 1, path: str = "flat",
                 shm: SharedMemoryModel | None = None):
        if algorithm not in ("ring", "rabenseifner"):
            raise ValueError(f"unknown allreduce algorithm {algorithm!r}; use ring or rabenseifner")
        if path not in ALLREDUCE_PATHS:
            raise ValueError(f"unknown allreduce path {path!r}; use flat or hierarchical")
        if ranks_per_node < 1:
            raise ValueError(f"ranks per node must be >= 1, got {ranks_per_node}")
        if ranks_per_node > 1 and algorithm != "ring":
            raise ValueError("ranks per node > 1 is modelled for the ring allreduce only")
        self.net, self.algorithm = net, algorithm
        self.ranks_per_node, self.path, self.shm = int(ranks_per_node), path, shm or SHARED_MEMORY

    def allreduce_time(self, nbytes: float, P: int) -> float:
        if self.path == "hierarchical":
            return hierarchical_allreduce_time(nbytes, P, self.ranks_per_node, self.net, self.shm)
        if self.ranks_per_node > 1:
            return flat_allreduce_time(nbytes, P, self.ranks_per_node, self.net, self.shm)
        return allreduce_time(nbytes, P, self.net, self.algorithm)

    def __getattr__(self, name):
        return getattr(self.net, name)
