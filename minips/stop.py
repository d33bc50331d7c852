"""The stop protocol: every rank stops at the same step when any rank is signalled."""
from __future__ import annotations

import numpy as np

from .distributed.comm.mpi import STOP_SIGNALS

__all__ = ["StopAgreement"]


class StopAgreement:
    """Stop every rank at the same step when any rank gets a stop signal:
    SIGTERM, SIGINT or SIGUSR1 (:data:`~minips.distributed.comm.mpi.STOP_SIGNALS`).

    Slurm sends SIGTERM to all tasks at a time limit (and ``--signal`` a chosen
    one before it); Hydra's mpiexec (MPICH, Intel MPI) forwards SIGTERM,
    SIGINT and SIGUSR1 to every rank, Open MPI's only SIGUSR1 (it kills the
    ranks on SIGTERM and SIGINT). The ranks may be at different steps. Each
    step every rank posts a 1-element Iallreduce (MAX) of its "stop" flag and
    reads the result posted one step earlier (long complete by then, so this
    adds no wait): all ranks see the same value at the same step and stop
    together. Virtual ranks (threads) register their
    handler with ``comm.signals``, which the process's main thread calls.
    """

    def __init__(self, comm):
        import signal

        self.comm, self.flag = comm, False
        self.bufs = [np.zeros(1, np.float32), np.zeros(1, np.float32)]
        self.req, self.i = None, 0
        self._old = {}
        # virtual ranks are threads: the main thread receives the signals and relays them
        self._relay = getattr(comm, "signals", None)
        if self._relay is not None:
            self._relay.add(self._handler)
            return
        for sig in STOP_SIGNALS:
            try:
                self._old[sig] = signal.signal(sig, self._handler)
            except ValueError:  # not the main thread
                pass

    def _handler(self, signum, frame):
        self.flag = True

    def should_stop(self) -> bool:
        """True on every rank at the same step once any rank was signalled."""
        if self.comm.size == 1:
            return self.flag
        stop = False
        if self.req is not None:
            self.req.wait()
            stop = self.req.buf[0] > 0
        buf = self.bufs[self.i]
        self.i ^= 1
        buf[0] = 1.0 if self.flag else 0.0
        self.req = self.comm.iallreduce(buf, tag="stop")
        return bool(stop)

    def close(self, wait: bool = True) -> None:
        """Complete the last flag exchange (``wait``) and restore the signal handlers."""
        import signal

        if self.req is not None and wait:
            self.req.wait()
        self.req = None
        if self._relay is not None:
            self._relay.remove(self._handler)
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old = {}

