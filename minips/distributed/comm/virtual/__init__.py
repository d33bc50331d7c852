"""Virtual ranks: the P ranks of one job as threads of this process.

``python -m minips train --virtual-ranks 64`` runs 64 ranks in one process, each
a thread executing the same Trainer step and the same algorithm code as a rank
of ``mpiexec -n 64``. Each rank has its own :class:`~minips.distributed.comm.Comm`,
built on a :class:`VirtualComm`: a communicator that answers the calls of
mpi4py that Comm makes (``Iallreduce``, ``Allgatherv``, ``Create_dist_graph_adjacent``
and its neighbour collectives, ``Isend``/``Irecv``/``Sendrecv``, ``Bcast``/``Ibcast``,
the pickled-object collectives, ``Split_type``, ``Abort``, requests with
``Test``/``Wait``). So the byte accounting, the buffer locking, the checks and
the request life cycle are Comm's own code under both back-ends, and the
algorithms cannot tell them apart. Why beneath Comm and not beside it:
docs/distributed.md, "Virtual ranks".

How a collective completes: the ranks of a communicator call collectives in
the same order (as MPI requires), so the k-th collective call of every rank
belongs to one slot. Each rank deposits its buffer there when it posts; the
rank that arrives last does the work (sums the buffers, copies the blocks) and
writes every rank's receive buffer, then marks every request complete. So a
nonblocking request progresses without being polled; the progress modes are
accepted and call what they call under MPI, but change nothing here.
Two ranks that call different collectives as their k-th get an error on both
(MPI would hang or fail); point-to-point messages match by (source,
destination, tag) in posting order, as MPI's non-overtaking rule says.

Sums are bitwise those of MPICH's recursive doubling (:func:`recursive_doubling`:
the ranks beyond the largest power of two fold into their neighbours, then a
pairwise tree), which MPICH 4-5 uses on one node for every message size we
tested (tests/test_virtual.py checks it against ``mpiexec`` for P = 2..6);
object reductions (``allreduce`` of Python numbers) follow mpi4py's binomial
tree (:func:`binomial`).

Threads and cores: at most ``cores`` ranks compute at once. A rank holds one
of ``cores`` compute slots (a semaphore) while it runs and gives it back
while it waits in a collective or for a message, so a rank never waits for a
slot held by a rank that waits for it. Each rank uses one Numba thread
(``numba.set_num_threads`` is per thread) and BLAS is limited to one thread
for the whole run (OpenBLAS called from many threads at once with more can
abort or return wrong results: OpenBLAS issue 1882, NumPy issue 29391).

Failure: a rank that raises aborts the world (:meth:`World.abort`): every
rank waiting in a call wakes with :class:`~minips.distributed.comm.JobAborted`,
every other rank gets it at its next call, and :func:`run` raises the first
rank's exception in the calling thread, naming the rank. Signals go to the
process's main thread, which relays SIGINT, SIGTERM and SIGUSR1 to every rank that
registered a handler (the stop protocol, :class:`minips.stop.StopAgreement`),
as mpiexec forwards them to every process; with none registered (or at a
second signal) the job is aborted.

Limits: P threads share one interpreter, so pure-Python work (the autograd
graph walk, the algorithms' bookkeeping) is serialised by the GIL; NumPy and
the Numba kernels (``nogil=True``) release it. Measured step times are not
cluster timings (outputs say VIRTUAL); network emulation does not sleep under
virtual ranks (``Comm.delays`` is False), the network only names the model
that projected times use.

The package, one job per module:

- :mod:`.shim`: the part of ``mpi4py.MPI`` that Comm uses (constants,
  reduction ops, ``Status``, requests, shared-memory windows);
- :mod:`.schedules`: the order in which a reduction combines the ranks'
  values (MPICH's recursive doubling, mpi4py's binomial tree);
- :mod:`.world`: what the ranks of one job share: the scheduler of their
  threads (compute slots), the abort state, the collectives and messages in
  progress, the signal relay;
- :mod:`.communicator`: :class:`VirtualComm`, one rank's communicator,
  answering mpi4py's calls;
- :mod:`.job`: :func:`run`, which starts the ranks' threads and ends the job.
"""
from __future__ import annotations

from .communicator import VirtualComm, VirtualGraphComm
from .job import MAX_RANKS, run
from .schedules import binomial, recursive_doubling
from .shim import MPI, VirtualMPIError
from .world import FairSemaphore, SignalRelay, World

__all__ = ["MPI", "VirtualComm", "VirtualGraphComm", "VirtualMPIError", "World", "SignalRelay", "FairSemaphore",
           "run", "recursive_doubling", "binomial", "MAX_RANKS"]
