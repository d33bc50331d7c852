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
    step every rank posts a 1-element Iallreduce (SUM) of its "stop" flag and
    reads the result posted one step earlier (long complete by then, so this
    adds no wait): all ranks see the same value at the same step and stop
    together. Virtual ranks (threads) register their
    handler with ``comm.signals``, which the process's main thread calls.

    The run's last step has no later step to read its exchange, so it
    completes the exchange at once (:meth:`should_stop_last`): a signal that
    comes up to the last step stops the run there, with its checkpoint.
    (Reading the flag one step late and leaving the loop at the last step
    without reading it lost a signal that came in the last two steps or in the
    final evaluation: accepted, so a second one would abort, yet acted on by
    no rank: no stop, no checkpoint, ``stopped: null``.) A signal after that
    last exchange cannot stop anything: the handler stays installed until the
    run's outputs are written (:meth:`close` at the very end), the run
    finishes, and :attr:`late` tells the trainer to say so.
    """

    def __init__(self, comm):
        import signal

        self.comm, self.flag = comm, False
        self.bufs = [np.zeros(1, np.float32), np.zeros(1, np.float32)]
        self.req, self.i = None, 0
        self.agreed = False  # a stop was agreed (every rank returned True)
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

    @property
    def late(self) -> bool:
        """A signal came that no agreed stop answered: after the last step's
        exchange (the run had nothing left to stop)."""
        return self.flag and not self.agreed

    def should_stop(self) -> bool:
        """True on every rank at the same step once any rank was signalled."""
        if self.comm.size == 1:
            self.agreed = self.flag
            return self.flag
        stop = self._read()
        self._post()
        self.agreed = stop
        return stop

    def should_stop_last(self) -> bool:
        """:meth:`should_stop` at the run's last step: the flag posted now is
        read now (a blocking exchange of one number), since no later step
        will; True on every rank when any rank was signalled before every rank
        had posted it."""
        if self.comm.size == 1:
            self.agreed = self.flag
            return self.flag
        stop = self._read()
        self._post()
        stop = self._read() or stop
        self.agreed = stop
        return stop

    def _read(self) -> bool:
        """The SUM of the flags posted by the last exchange (waited for; False if none)."""
        if self.req is None:
            return False
        self.req.wait()
        stop = bool(self.req.buf[0] > 0)
        self.req = None
        return stop

    def _post(self) -> None:
        buf = self.bufs[self.i]
        self.i ^= 1
        buf[0] = 1.0 if self.flag else 0.0
        self.req = self.comm.iallreduce(buf, tag="stop")

    def complete(self) -> None:
        """Complete the last flag exchange (collective), keeping the handlers."""
        if self.req is not None:
            self.req.wait()
        self.req = None

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
