"""Comm, the communicator every algorithm talks to: its state, node layout, request life cycle and abort.

:class:`Comm` wraps a world communicator with what the algorithms need. The
communicator is an ``mpi4py`` one (:mod:`.mpi`, the only module that imports
mpi4py: ranks are processes started by ``mpiexec``) or a
:class:`~minips.distributed.comm.virtual.VirtualComm` (:mod:`.virtual`: ranks
are threads of one process) that answers the same mpi4py calls. Everything
above the communicator (checks, byte accounting, buffer locking, network
emulation, progress) is Comm's own code, so both back-ends behave alike by
construction. Comm is assembled from one mixin per family of primitives, each
in its own module:

- :mod:`.collectives`: ``allreduce(buf)`` (blocking, in place, sum) and
  ``iallreduce(buf)`` (nonblocking, in place, returning a :class:`Request`) on
  contiguous float32 buffers, flat or hierarchical (:mod:`.hierarchical`);
  ``allgatherv``/``iallgatherv`` (1-D arrays of any dtype and per-rank
  length); ``bcast``/``ibcast``; ``allreduce_scalar``/``iallreduce_scalar``;
  ``bcast_obj``, ``allgather``, ``gather_obj`` of small Python objects;
  ``barrier``;
- :mod:`.neighbor`: ``neighbor_allgather``/``ineighbor_allgather`` on a
  static directed :class:`NeighborGraph` (``graph(sources, destinations)``);
- :mod:`.point_to_point`: ``sendrecv``/``iexchange`` with a peer that may
  change every call;
- :mod:`.meter`: network emulation and byte accounting (``bytes_sent``,
  ``stats``);

(the table in docs/distributed.md, "Communication primitives"). This module
holds the rest:

- ``rank``, ``size``, and ``local_rank``/``local_size`` (ranks on this node,
  from ``MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)``) to size thread pools,
  and the node layout the hierarchical allreduce follows;
- the tail every nonblocking primitive shares (lock its buffers,
  :mod:`.buffers`; its emulated finish; the progress thread; the pending set,
  :mod:`.request`);
- ``progress()``: test every pending request, so a nonblocking collective
  advances (MPICH progresses communication only inside MPI calls unless an
  asynchronous progress thread is enabled);
- ``abort(message)``: end the whole job, never leave the other ranks hanging.

A job started without ``mpiexec`` (no PMI/PMIx/Open MPI variables in the
environment) or without mpi4py installed gets a one-rank communicator with the
same interface, so a student can run everything before meeting MPI.
With ``--virtual-ranks P`` (:func:`minips.distributed.comm.virtual.run`) the
same code runs as P threads, each with its own Comm.
"""
from __future__ import annotations

import collections
import contextlib
import sys

from ..costmodel import NetworkModel, parse_network
from . import mpi as mpi_backend
from .buffers import BufferLocks
from .collectives import Collectives
from .meter import Meter
from .neighbor import NeighborCollectives
from .point_to_point import PointToPoint
from .request import JobAborted, ProgressThread, Request

__all__ = ["ALLREDUCE_MODES", "PROGRESS_MODES", "Comm"]

PROGRESS_MODES = ("none", "poll", "thread")
ALLREDUCE_MODES = ("flat", "hierarchical", "auto")


def _check_allreduce_mode(mode) -> None:
    if mode not in ALLREDUCE_MODES:
        raise ValueError(f"unknown allreduce {mode!r}; choose one of {', '.join(ALLREDUCE_MODES)} (auto: hierarchical "
                         "when there is more than one node and more than one rank per node)")


class Comm(Collectives, NeighborCollectives, PointToPoint, Meter):
    """A world communicator for data-parallel training.

    Args:
        mpi_comm: an ``mpi4py.MPI.Comm``; default ``COMM_WORLD`` when launched
            by MPI (see :func:`launched_by_mpi`), else a one-rank communicator.
        network: an emulated interconnect (a :class:`NetworkModel`, a name such
            as ``"1gbe"``, or ``"alpha=..,beta=.."``), or None for the real one.
        progress: ``"none"``, ``"poll"`` or ``"thread"`` (see docs/distributed.md).

    Raises:
        ValueError: unknown progress mode or network.
    """

    def __init__(self, mpi_comm=None, network=None, progress: str = "poll", allreduce: str = "auto",
                 ranks_per_node: int | None = None):
        if progress not in PROGRESS_MODES:
            raise ValueError(f"unknown progress mode {progress!r}; choose one of {', '.join(PROGRESS_MODES)}")
        _check_allreduce_mode(allreduce)
        self.MPI = None
        if mpi_comm is None and mpi_backend.launched_by_mpi():
            mpi_comm = mpi_backend.world()
        if mpi_comm is not None:
            # a virtual communicator carries its own stand-in of the mpi4py.MPI module
            self.MPI = getattr(mpi_comm, "MPI", None) or mpi_backend.module()
        self.mpi = mpi_comm
        self.rank = mpi_comm.Get_rank() if mpi_comm is not None else 0
        self.size = mpi_comm.Get_size() if mpi_comm is not None else 1
        if mpi_comm is not None and self.size > 1:
            node = mpi_comm.Split_type(self.MPI.COMM_TYPE_SHARED, key=self.rank)
            self.local_rank, self.local_size = node.Get_rank(), node.Get_size()
            # the machine's nodes: each rank's node leader (lowest world rank), numbered in order
            leaders = mpi_comm.allgather(node.bcast(self.rank, root=0))
            node.Free()
            number = {r: i for i, r in enumerate(sorted(set(leaders)))}
            self._machine_nodes = tuple(number[r] for r in leaders)
        else:
            self.local_rank, self.local_size = 0, 1
            self._machine_nodes = (0,) * self.size
        self.network: NetworkModel | None = parse_network(network) if network else None
        self._hier = None  # the HierarchicalAllreduce, built at the first hierarchical allreduce
        self._set_nodes(allreduce, ranks_per_node)
        #: True when the ranks are threads of this process (:mod:`.virtual`)
        self.virtual = bool(getattr(self.MPI, "VIRTUAL", False))
        #: whether network emulation sleeps (False under virtual ranks: the network is only modelled)
        self.delays = not self.virtual
        #: virtual ranks: where a rank registers its signal handlers (the process's
        #: main thread receives the signals and relays them); None under MPI
        self.signals = getattr(mpi_comm, "signals", None)
        self.progress_mode = progress
        self._pending: set[Request] = set()
        self._thread = self._progress_thread(progress)
        self._locks = BufferLocks()  # the arrays that pending requests hold read-only
        self._start_meter()  # stats and the emulated link (.meter)

    # --- info -------------------------------------------------------------------
    @property
    def is_root(self) -> bool:
        """True on rank 0 (the rank that writes files)."""
        return self.rank == 0

    def _set_nodes(self, allreduce: str, ranks_per_node) -> None:
        """Set the allreduce mode and the node layout (see :attr:`node_of`).

        Raises:
            ValueError: an unknown mode, or ranks per node outside 1..P.
        """
        _check_allreduce_mode(allreduce)
        if ranks_per_node is not None:
            try:
                ranks_per_node = int(ranks_per_node)
            except (TypeError, ValueError):
                raise ValueError(f"--ranks-per-node must be a whole number of ranks, got {ranks_per_node!r}") from None
            if not 1 <= ranks_per_node <= max(1, self.size):
                raise ValueError(f"--ranks-per-node {ranks_per_node}: give 1..{self.size} (the job has {self.size} "
                                 f"rank(s); ranks 0..N-1 form node 0, and so on)")
        self.allreduce_mode = allreduce
        #: ranks per node as given (``--ranks-per-node``), else None (see :attr:`node_of`)
        self.ranks_per_node = ranks_per_node
        if ranks_per_node is not None:
            layout = tuple(r // ranks_per_node for r in range(self.size))
        elif self.network is not None:
            layout = tuple(range(self.size))  # the emulator's standing assumption: a node per rank
        else:
            layout = self._machine_nodes
        #: node index of every rank (0..nodes-1): ``rank // ranks_per_node`` with ``--ranks-per-node``;
        #: without it, a node per rank under ``--network`` (the emulator's assumption), else the machine's
        #: nodes (``MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)``)
        self.node_of = layout
        sizes = collections.Counter(layout)
        self.nodes = len(sizes)
        #: ranks on this rank's node, and the most on any node
        self.node_size = sizes[layout[self.rank]]
        self.max_node_size = max(sizes.values())

    @property
    def hierarchical(self) -> bool:
        """Whether ``allreduce``/``iallreduce`` take the hierarchical path
        (``hierarchical``, or ``auto`` with more than one node and more than
        one rank on some node; never on one rank)."""
        if self.size == 1 or self.allreduce_mode == "flat":
            return False
        return self.allreduce_mode == "hierarchical" or (self.nodes > 1 and self.max_node_size > 1)

    def describe(self) -> str:
        """One line: ranks, nodes' ranks, MPI library (or VIRTUAL ranks), network
        (real, emulated, or under virtual ranks modelled only)."""
        lib = "no MPI (one process)"
        if self.MPI is not None:
            lib = mpi_backend.library_version(self.MPI)
        net = f"EMULATED network {self.network}" if self.network else "real network"
        if self.virtual:
            net = (f"network {self.network} MODELLED for projected times (not emulated)" if self.network
                   else "no network (shared memory)")
        nodes = ""
        if self.ranks_per_node is not None or self.hierarchical:
            how = f"--ranks-per-node {self.ranks_per_node}" if self.ranks_per_node is not None else "the machine's"
            nodes = (f"; {self.nodes} node(s) of up to {self.max_node_size} rank(s) ({how}), allreduce "
                     f"{'hierarchical' if self.hierarchical else 'flat'}")
        return (f"{self.size} rank(s), {self.local_size} on this node; {lib}; {net}; "
                f"progress={self.progress_mode}{nodes}")

    # --- the request life cycle ----------------------------------------------------------
    def _post(self, prim, mpi_reqs, buf, lock, seconds, nbytes, sent, tag=None, on_done=None, op=None) -> Request:
        """The common tail of every nonblocking primitive, called right after
        the MPI call (MPI needs writable buffers when posting): lock, emulated
        completion time, progress thread, pending set, counters."""
        req = Request(self, mpi_reqs, buf, self._locks.lock(lock), None, tag, on_done, op)
        req.ready_time = self._link_until(seconds, req.post_time)
        if self._thread is not None and req._reqs:
            req._event = self._thread.submit(req._reqs)
        self._pending.add(req)
        self._count(prim, nbytes, sent)
        return req

    def progress(self) -> int:
        """Test every pending request (lets MPI advance them); returns how many remain.
        Cheap when nothing is pending."""
        if not self._pending:
            return 0
        self.stats["progress_calls"] += 1
        for r in list(self._pending):
            r.test()
        return len(self._pending)

    def pending(self) -> int:
        """Number of requests posted and not yet completed."""
        return len(self._pending)

    def wait_all(self) -> float:
        """Wait for every pending request; returns seconds blocked."""
        return sum(r.wait() for r in list(self._pending))

    def _idle(self):
        """Context for a wait outside the communicator's own calls: a virtual
        rank gives its compute slot to another rank meanwhile."""
        idle = getattr(self.mpi, "idle", None)
        return idle() if idle is not None else contextlib.nullcontext()

    def _check_aborted(self) -> None:
        if getattr(self.mpi, "aborted", False):
            raise JobAborted()

    # --- arguments ---------------------------------------------------------------------
    def _peer(self, r, what: str) -> int:
        try:
            r = int(r)
        except (TypeError, ValueError):
            raise TypeError(f"{what} must be a rank (int), got {r!r}") from None
        if not 0 <= r < self.size:
            raise ValueError(f"{what} = {r} is not a rank of this job (0..{self.size - 1})")
        return r

    # --- the job -------------------------------------------------------------------------
    def abort(self, message: str, code: int = 1, prefix: bool = True) -> None:
        """Print ``message`` (prefixed with the rank unless ``prefix`` is False)
        to stderr and end the whole job with ``MPI_Abort``, so no rank waits
        forever on a dead peer.

        Under MPI the message must reach the terminal before the abort: the
        process manager kills every rank and may end before it forwards what is
        still in a rank's output pipe (seen as a failed job with no output at
        all when the launcher was slow to be scheduled), so this waits until
        the pipe is read (:func:`.mpi.drain_output`), then silences the MPI
        library's own abort lines (the message has said it all) and aborts
        (:func:`.mpi.abort`: ``MPI_Abort``, without Open MPI's banner). Under virtual
        ranks the process lives on: the other ranks raise :class:`JobAborted`
        at their next call (a rank waiting in one at once) and this one raises
        SystemExit; when the job is already ending (another rank aborted
        first), nothing is printed."""
        claim = getattr(self.mpi, "claim_abort", None)  # virtual ranks: the first to abort speaks
        if self.size > 1 and claim is not None and not claim(code):
            raise JobAborted()
        sys.stderr.write(f"[minips rank {self.rank}] {message}\n" if prefix else f"{message}\n")
        sys.stderr.flush()
        if claim is None:
            mpi_backend.drain_output()
        if self.size > 1:
            if claim is None:  # not under virtual ranks: fd 2 is the whole process's
                mpi_backend.silence_stderr()
                mpi_backend.abort(getattr(self, "MPI", None), self.mpi, code)  # MPI_Abort, without Open MPI's banner
            self.mpi.Abort(code)
        raise SystemExit(code)

    def reconfigure(self, network=None, progress: str = "poll", allreduce: str = "auto",
                    ranks_per_node: int | None = None) -> None:
        """Change the network model, the progress mode, the allreduce mode and
        the ranks per node (between runs: no request may be pending when the
        progress mode changes; a new node layout takes effect at the next
        hierarchical allreduce, which every rank reaches).

        Raises:
            ValueError: unknown progress mode, network or allreduce mode; ranks
                per node outside 1..P.
        """
        if progress not in PROGRESS_MODES:
            raise ValueError(f"unknown progress mode {progress!r}; choose one of {', '.join(PROGRESS_MODES)}")
        _check_allreduce_mode(allreduce)
        self.network = parse_network(network) if network else None
        self._set_nodes(allreduce, ranks_per_node)
        if progress != self.progress_mode:
            thread = self._progress_thread(progress)  # may refuse: before anything changes
            self.close()
            self.progress_mode = progress
            self._thread = thread

    def _progress_thread(self, progress: str) -> ProgressThread | None:
        """The progress thread of ``progress="thread"`` on several ranks, else None.

        Raises:
            ValueError: the MPI library granted less than ``MPI_THREAD_MULTIPLE``
                (the thread calls ``MPI_Test`` while the training thread calls MPI).
        """
        if progress != "thread" or self.size == 1:
            return None
        if not self.virtual:
            granted = self.MPI.Query_thread()
            if granted < self.MPI.THREAD_MULTIPLE:
                raise ValueError(
                    "--progress thread calls MPI from a second thread and needs MPI_THREAD_MULTIPLE, but this MPI "
                    f"library granted {mpi_backend.thread_level_name(self.MPI, granted)}: use --progress poll (the "
                    "default), or unset MPI4PY_RC_THREAD_LEVEL / use an MPI built with thread support")
        return ProgressThread()

    def close(self) -> None:
        """Stop the progress thread (pending requests must be waited first)."""
        if self._thread is not None:
            self._thread.stop()
            self._thread = None
