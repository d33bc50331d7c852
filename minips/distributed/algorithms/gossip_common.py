"""What the gossip methods of this package share: the topology options, the
topology built from them, the mixing step ``x_i <- sum_j W_ij x_j`` on a static
graph (neighbour allgather, blocking or posted) or a time-varying one (one
sendrecv with the step's peer), the cost of one mixing step for the cost
models, and the base classes.

- Options: :class:`GossipOptions` (a dataclass with ``topology``, ``seed`` and
  ``radius``; subclass it to add a method's own), or, where a method lists its
  own options first, the field factories :func:`topology_field`,
  :func:`seed_field`, :func:`radius_field` and :func:`validate_topology`.
- :func:`build_topology`: the graph the options name on P ranks (errors name
  the option).
- :class:`Mixer`: one rank's mixing step, ``mixed(x, t)`` (a new array),
  ``mix(x, t)`` (in place), ``post``/``complete`` (nonblocking).
- :func:`gossip_time`: its cost, ``degree x (alpha + n beta)``, independent of P.
- :class:`GossipMethod` (family, no per-step gradient allreduce, replicas
  differ) and :class:`GossipAlgorithm` (plus the topology from the options,
  checked on all ranks, its Mixer and its summary.json entry).

Which matrix a time-varying graph (one-peer-exponential) uses is the index
the caller passes to the Mixer: :meth:`GossipAlgorithm.gossip` passes the
number of gossip ROUNDS done (``mix_rounds``, checkpointed:
``graph_clock = "round"``); methods that mix several vectors in one step or
skip gossip on some steps and keep the step's graph pass the step count
(``graph_clock = "step"``).

Summation order (``Mixer(order=...)``): ``"rank"`` computes ``sum_j W_ij x_j``
in float32 over j in ascending rank order (this rank's own term in its place),
so on the complete graph every rank computes the same sum in the same order
and the ranks stay bitwise identical; ``"self-first"`` starts from
``W_ii x_i`` and adds the in-neighbours in ascending order. The two differ
only by float32 rounding.
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field

import numpy as np

from ..topology import TOPOLOGIES, check_same_on_all_ranks, make_topology
from .base import Algorithm

__all__ = ["GossipAlgorithm", "GossipMethod", "GossipOptions", "Mixer", "build_topology", "exchange_degree",
           "gossip_time", "radius_field", "seed_field", "topology_field", "topology_options", "validate_topology"]

ORDERS = ("rank", "self-first")


# --- options ------------------------------------------------------------------------
def topology_field(default: str = "ring", choices: tuple = tuple(TOPOLOGIES), help: str = ""):
    """The ``topology`` option every gossip method has (a new Field each call)."""
    return field(default=default, metadata={
        "choices": choices, "help": help or "communication graph (python -m minips topology NAME -n P draws it)"})


def seed_field(default: int = 0):
    """The ``seed`` option of the random-geometric graph."""
    return field(default=default, metadata={"help": "random-geometric: seed of the points (same on every rank)"})


def radius_field():
    """The ``radius`` option of the random-geometric graph (0 = its default)."""
    return field(default=0.0, metadata={
        "help": "random-geometric: link radius in the unit square (0 = 1.5 sqrt(ln P / P))"})


def validate_topology(options) -> None:
    """``topology`` one of its field's choices, ``radius >= 0``."""
    choices = next((f.metadata.get("choices") for f in dataclasses.fields(options) if f.name == "topology"),
                   None) or tuple(TOPOLOGIES)
    if options.topology not in choices:
        raise ValueError(f"topology must be one of {', '.join(choices)}, got {options.topology!r}")
    if options.radius < 0:
        raise ValueError(f"radius must be >= 0 (0 = the default 1.5 sqrt(ln P / P)), got {options.radius}")


@dataclass
class GossipOptions:
    """Options common to gossip methods (a base for a method's ``Options``)."""
    topology: str = topology_field()
    seed: int = seed_field()
    radius: float = radius_field()

    def validate(self):
        validate_topology(self)


# --- the graph and its cost ---------------------------------------------------------
def topology_options(options, name: str | None = None) -> dict:
    """Keyword options of :func:`make_topology` for graph ``name`` (default
    ``options.topology``): random-geometric's seed/radius, else none."""
    if (name or options.topology) != "random-geometric":
        return {}
    return {"seed": options.seed, **({"radius": options.radius} if options.radius > 0 else {})}


def build_topology(options, P: int, name: str | None = None):
    """The topology the options name (or ``name``) on P ranks.

    Raises:
        ValueError: with the option named (``topology=NAME: ...``): unknown
            name, not connected, one-peer-exponential on P not a power of two.
    """
    name = name or options.topology
    try:
        return make_topology(name, P, **topology_options(options, name))
    except ValueError as e:
        raise ValueError(f"topology={name}: {e}") from None


@functools.lru_cache(maxsize=256)
def exchange_degree(name: str, P: int, seed: int = 0, radius: float = 0.0) -> int:
    """Messages per mixing step on the busiest rank: the largest
    ``max(remote in-degree, remote out-degree)`` over ranks (what the emulated
    neighbour exchange charges); 1 for the one-peer exponential graph (one
    sendrecv), 0 for P = 1."""
    if P == 1:
        return 0
    W = build_topology(GossipOptions(name, seed, radius), P).W
    edges = (W > 0) & ~np.eye(P, dtype=bool)
    return int(max(edges.sum(axis=0).max(), edges.sum(axis=1).max()))


def gossip_time(options, nbytes: float, P: int, net) -> float:
    """Seconds of one mixing step of ``nbytes`` per rank: ``degree (alpha + n beta)``
    on a static graph (``net.neighbor_time``), ``alpha + n beta`` for the
    one-peer exponential graph (``net.message_time``), 0 for P = 1.
    Independent of P except through the degree."""
    if P <= 1:
        return 0.0
    if options.topology == "one-peer-exponential":
        return net.message_time(nbytes)
    deg = exchange_degree(options.topology, P, options.seed, options.radius)
    return net.neighbor_time(nbytes, deg)


# --- the mixing step ----------------------------------------------------------------
class _Posted:
    """A mixing step in flight: the request (None for a time-varying graph,
    whose exchange is done at completion), the copy sent, the step's graph."""
    __slots__ = ("buf", "mixed", "req", "top")

    def __init__(self, req, buf, top):
        self.req, self.buf, self.top, self.mixed = req, buf, top, None


class Mixer:
    """``x_i <- sum_j W_ij(t) x_j`` for this rank of ``comm`` on ``topology``.

    Static graphs use one ``comm.graph`` (in-neighbours = sources, with their
    weights) and ``neighbor_allgather``; time-varying graphs (``topology.period
    > 0``, the one-peer exponential graph) use ``topology.at(t)`` and one
    ``sendrecv`` to the step's out-neighbour from its in-neighbour.

    Args:
        comm: the communicator (its size is P).
        topology: a :class:`~minips.distributed.topology.Topology` on P ranks.
        order: the float32 summation order, ``"rank"`` or ``"self-first"``
            (see the module's docstring).
    """

    def __init__(self, comm, topology, order: str = "rank"):
        if order not in ORDERS:
            raise ValueError(f"order must be one of {', '.join(ORDERS)}, got {order!r}")
        self.comm, self.top, self.order = comm, topology, order
        self.rank, self.P = comm.rank, comm.size
        self.graph = None
        if self.P > 1 and not topology.period:
            src = topology.in_neighbors(self.rank)
            self.graph = comm.graph(src, topology.out_neighbors(self.rank), topology.W[self.rank, src])

    def _combine(self, x, top, sources, rows) -> np.ndarray:
        """``sum_j W_ij x_j`` in float32 (own term ``x``), in this Mixer's order."""
        W = top.W[self.rank]
        if self.order == "self-first":
            out = x * np.float32(W[self.rank])
            for j, v in zip(sources, rows):
                out += np.float32(W[j]) * v
            return out
        terms = sorted([(self.rank, x), *zip(sources, rows)], key=lambda jr: jr[0])
        out = np.zeros_like(x)
        for j, v in terms:
            out += np.float32(W[j]) * v
        return out

    def mixed(self, x: np.ndarray, t: int) -> np.ndarray:
        """Blocking: the mix of ``x`` at index ``t`` (a new float32 array of
        x's shape; one neighbour exchange of x)."""
        return self.complete(self.post(x, t, blocking=True))

    def mix(self, x: np.ndarray, t: int) -> None:
        """Blocking: ``x`` <- its mix at index ``t``, in place."""
        if self.P > 1:
            x[...] = self.mixed(x, t)

    def post(self, x: np.ndarray, t: int, blocking: bool = False) -> _Posted:
        """Start mixing a copy of ``x`` (nonblocking on a static graph; a
        time-varying graph's sendrecv runs at :meth:`complete`)."""
        top = self.top.at(t)
        buf = x.copy()  # read-only while in flight; x stays free
        if self.P == 1 or self.graph is None:
            return _Posted(None, buf, top)
        if blocking:
            p = _Posted(None, buf, top)
            p.mixed = self._combine(buf, top, self.graph.sources, self.comm.neighbor_allgather(self.graph, buf))
            return p
        return _Posted(self.comm.ineighbor_allgather(self.graph, buf, tag=("mix", t)), buf, top)

    def complete(self, p: _Posted) -> np.ndarray:
        """Wait for ``p`` (or do its sendrecv) and return the mixed vector (kept in ``p.mixed``)."""
        if p.mixed is not None:
            return p.mixed
        if self.P == 1:
            p.mixed = p.buf
        elif p.req is not None:
            p.req.wait()
            p.mixed = self._combine(p.buf, p.top, self.graph.sources, p.req.result)
        else:  # time-varying: one peer this step
            dest, src = p.top.out_neighbors(self.rank), p.top.in_neighbors(self.rank)
            got = self.comm.sendrecv(p.buf, dest[0], src[0])
            p.mixed = self._combine(p.buf, p.top, src, [got])
        p.req = None
        return p.mixed


# --- base classes -------------------------------------------------------------------
class GossipMethod(Algorithm):
    """What every gossip method is: family ``gossip``, no allreduce of the
    gradient per step, ranks whose weights differ."""

    family = "gossip"
    gradient_allreduce_per_step = False  # gossip never allreduces the gradient every step

    @classmethod
    def keeps_replicas(cls, options) -> bool:
        return False  # ranks mix with neighbours or partners only: their weights differ


class GossipAlgorithm(GossipMethod):
    """Base of the gossip methods on a fixed graph named by their options
    (``topology``, ``seed``, ``radius``): :meth:`setup` builds the topology,
    checks it is the same on all ranks and makes its :class:`Mixer`;
    :meth:`report` puts ``topology.describe()`` in summary.json.

    Class attributes a method may set:
        graph_clock: ``"round"`` (default): :meth:`gossip` indexes a
            time-varying graph by the gossip rounds done (``mix_rounds``,
            checkpointed); ``"step"``: the method passes the step count to the
            mixer itself and no round counter is checkpointed.
        mix_order: the Mixer's summation order (``"rank"``, ``"self-first"``),
            or None for no Mixer (a method that exchanges on its own).
    """

    graph_clock = "round"
    mix_order: str | None = "rank"

    def topology_name(self) -> str:
        """The graph to build on this job's ranks (default: the option)."""
        return self.options.topology

    def check_graph(self, topology) -> None:
        """Refuse a graph this method cannot use (before the all-ranks check); default: any."""

    def setup(self) -> None:
        self.topology = build_topology(self.options, self.comm.size, self.topology_name())
        self.check_graph(self.topology)
        check_same_on_all_ranks(self.topology, self.comm)
        self.mixer = Mixer(self.comm, self.topology, self.mix_order) if self.mix_order else None
        self.mix_rounds = 0  # gossip rounds done (graph_clock "round")

    def gossip(self) -> None:
        """One blocking mixing step of the weights (phase ``mix``) with the
        graph of round ``mix_rounds``."""
        with self.timer.phase("mix"):
            self.mixer.mix(self.flat.weights, self.mix_rounds)
        self.mix_rounds += 1

    def state_dict(self) -> dict:
        state = super().state_dict()
        return {**state, "mix_rounds": self.mix_rounds} if self.graph_clock == "round" else state

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        if self.graph_clock == "round":
            self.mix_rounds = int(state.get("mix_rounds", 0))

    def report(self) -> dict:
        return {"topology": self.topology.describe()}
