"""The MPI back-end of :class:`~minips.distributed.comm.Comm`: the only module
of minips that imports mpi4py.

It starts MPI (with a time limit, :func:`_init_mpi_within_timeout`), says
whether a process manager launched this process (:func:`launched_by_mpi`), and
hands :class:`~minips.distributed.comm.Comm` the ``mpi4py.MPI`` module, whose
communicators Comm drives. The other back-end, :mod:`.virtual`, offers the
same calls on ranks that are threads of one process.
"""
from __future__ import annotations

import os
import sys
import time

__all__ = ["MPI_INIT_TIMEOUT_S", "launched_by_mpi", "launcher_world", "world", "module", "drain_output",
           "silence_stderr"]

_LAUNCHER_VARS = ("PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS",
                  "HYDRA_CONTROL_FD")

#: Seconds a rank may spend in MPI_Init and the first node query before it gives
#: up (``MINIPS_MPI_INIT_TIMEOUT``; 0 = wait for ever). See :func:`_init_mpi_within_timeout`.
MPI_INIT_TIMEOUT_S = 300.0


def _init_mpi_within_timeout():
    """``from mpi4py import MPI`` (which runs MPI_Init) and the first collective,
    ended by the process itself if they do not return within
    ``MINIPS_MPI_INIT_TIMEOUT`` seconds (default :data:`MPI_INIT_TIMEOUT_S`).

    Why: when one rank dies before it reaches MPI_Init (Ctrl-C or ``sys.exit``
    during the interpreter's start-up), mpiexec does not end the others, which
    wait in MPI_Init for it for ever. No Python code can run while MPI_Init
    blocks, so the timer is :func:`faulthandler.dump_traceback_later`, a C
    thread: it prints "Timeout" and the stack (ending in this function) to
    stderr and exits with status 1.

    Returns:
        the ``mpi4py.MPI`` module, initialised.
    Raises:
        ValueError: ``MINIPS_MPI_INIT_TIMEOUT`` is not a number.
    """
    import faulthandler

    raw = os.environ.get("MINIPS_MPI_INIT_TIMEOUT", "")
    try:
        timeout = float(raw) if raw else MPI_INIT_TIMEOUT_S
    except ValueError:
        raise ValueError(f"MINIPS_MPI_INIT_TIMEOUT={raw!r} is not a number of seconds (0 = no limit)") from None
    if timeout > 0:
        sys.stderr.flush()
        faulthandler.dump_traceback_later(timeout, exit=True)
    try:
        from mpi4py import MPI  # MPI_Init: blocks until every rank of the job has started
        MPI.COMM_WORLD.Barrier()  # and has got this far
    finally:
        if timeout > 0:
            faulthandler.cancel_dump_traceback_later()
    return MPI


def launched_by_mpi() -> bool:
    """True when a process manager (mpiexec, srun with PMI/PMIx) started us,
    or when ``MINIPS_MPI=1`` asks for MPI explicitly."""
    if os.environ.get("MINIPS_MPI") == "1":
        return True
    if os.environ.get("MINIPS_MPI") == "0":
        return False
    if any(v in os.environ for v in _LAUNCHER_VARS):
        return True
    return int(os.environ.get("SLURM_NTASKS", "1")) > 1 and "SLURM_PROCID" in os.environ


def launcher_world() -> tuple[int | None, int | None]:
    """(rank, size) of this process as its launcher's environment says (MPICH/
    Hydra ``PMI_RANK``/``PMI_SIZE``, Open MPI, Slurm), before MPI starts; None
    for what the environment does not say."""
    def first(*names):
        for n in names:
            try:
                return int(os.environ[n])
            except (KeyError, ValueError):
                continue
        return None
    return (first("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID"),
            first("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS"))


def world():
    """``mpi4py.MPI.COMM_WORLD``, starting MPI within the time limit.

    Raises:
        RuntimeError: mpi4py is not installed (the message names the fix).
        ValueError: see :func:`_init_mpi_within_timeout`.
    """
    try:
        MPI = _init_mpi_within_timeout()
    except ImportError:
        raise RuntimeError("launched by mpiexec but mpi4py is not installed: pip install -e '.[mpi]'") from None
    return MPI.COMM_WORLD


def module():
    """The ``mpi4py.MPI`` module (constants, ``Request.Testall``, ``Status``)."""
    from mpi4py import MPI
    return MPI


def drain_output(timeout: float = 5.0) -> None:
    """Flush stdout and stderr and wait (at most ``timeout`` seconds) until the
    reader of each (mpiexec's proxy, when they are pipes or sockets) has taken
    everything written: the bytes still in the pipe (``FIONREAD``) or the
    socket's send queue (``TIOCOUTQ``). A terminal or a file is written once
    ``write`` returns: no wait. Any error ends the wait (it only delays).

    Why: ``MPI_Abort`` makes the process manager kill every rank, and it may end
    before it forwards what is still in a rank's pipe (a failed job with no
    output at all when the launcher was slow to be scheduled)."""
    import stat
    try:
        import fcntl
        import struct
        import termios
    except ImportError:  # not a POSIX system
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
            fd = stream.fileno()
            mode = os.fstat(fd).st_mode
        except (AttributeError, OSError, ValueError):
            continue
        request = termios.FIONREAD if stat.S_ISFIFO(mode) else termios.TIOCOUTQ if stat.S_ISSOCK(mode) else None
        deadline = time.monotonic() + timeout
        while request is not None and time.monotonic() < deadline:
            try:
                unread = struct.unpack("i", fcntl.ioctl(fd, request, b"\0\0\0\0"))[0]
            except OSError:
                break
            if unread <= 0:
                break
            time.sleep(0.002)


def silence_stderr() -> None:
    """Point file descriptor 2 at /dev/null (MPI_Abort's own line, after minips' message)."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
    except OSError:
        pass
