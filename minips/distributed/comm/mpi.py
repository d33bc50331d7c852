"""The MPI back-end of :class:`~minips.distributed.comm.Comm`: the only module
of minips that imports mpi4py.

It starts MPI (with a time limit, :func:`_init_mpi_within_timeout`), says
whether a process manager launched this process (:func:`launched_by_mpi`), and
hands :class:`~minips.distributed.comm.Comm` the ``mpi4py.MPI`` module, whose
communicators Comm drives. The other back-end, :mod:`.virtual`, offers the
same calls on ranks that are threads of one process.

It is also the one place that knows the launchers (:data:`LAUNCHERS`): the
program that started the ranks, as a rank sees it (:func:`rank_launcher`) and
as a process that starts ``mpiexec`` sees it (:func:`mpiexec_launcher`): its
flags for binding, oversubscription and root, which signals it forwards to
every rank (the stop that checkpoints, :data:`STOP_SIGNALS`), and how a
library ends a job quietly (:func:`abort`). The library, the benchmarks
(:mod:`minips.bench.launch`) and the tests read it from here.
"""
from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

__all__ = ["MPI_INIT_TIMEOUT_S", "launched_by_mpi", "launcher_world", "world", "module", "drain_output",
           "silence_stderr", "Launcher", "LAUNCHERS", "STOP_SIGNALS", "rank_launcher", "mpiexec_launcher",
           "stop_hint", "cores_fit", "library_version", "abort", "thread_level_name"]

_LAUNCHER_VARS = ("PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS",
                  "HYDRA_CONTROL_FD")

#: Seconds a rank may spend in MPI_Init and the first node query before it gives
#: up (``MINIPS_MPI_INIT_TIMEOUT``; 0 = wait for ever). See :func:`_init_mpi_within_timeout`.
MPI_INIT_TIMEOUT_S = 300.0

#: The signals that stop a run with every rank's checkpoint (:class:`minips.stop.StopAgreement`):
#: SIGTERM (what Slurm sends every task at a time limit; Hydra's mpiexec forwards it), SIGINT
#: (Ctrl-C at Hydra's mpiexec, which forwards it) and SIGUSR1, which every launcher here forwards
#: to every rank, Open MPI's mpiexec included (it kills the ranks on SIGTERM and SIGINT).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)


@dataclass(frozen=True)
class Launcher:
    """What minips needs to know about the program that starts the ranks.

    Attributes:
        key: ``"mpich"``, ``"intel"``, ``"openmpi"`` or ``"srun"`` (the keys of :data:`LAUNCHERS`).
        name: the launcher as its documentation names it (Hydra, PRRTE, srun).
        mpi: the MPI library it comes with ("any" for srun).
        forwards: the :data:`STOP_SIGNALS` that it passes on to every rank (as names);
            the others end the ranks before they can save anything.
        stop_signal: the one to send for a stop with checkpoints (``kill -s NAME PID``).
        stop_hint: the same, said to a user.
        binds_by_default: whether it binds ranks to cores when not asked (so that
            "no binding" must be said with a flag).
    """
    key: str
    name: str
    mpi: str
    forwards: tuple
    stop_signal: str
    stop_hint: str
    binds_by_default: bool

    def bind_args(self, P: int, threads: int, cores: int, bind: bool = True) -> list[str]:
        """The launcher's flags that bind ``P`` ranks of ``threads`` threads each
        to cores of a node of ``cores`` cores: one core a rank for one thread,
        ``threads`` cores a rank for more (a rank of T threads bound to one core
        runs them in turns there, 10-20x slower than one thread: issue 30).
        When ``bind`` is off or the ranks' threads do not fit on the cores
        (binding would stack ranks on shared cores): no flag where the launcher
        binds nothing by default (Hydra of MPICH), else the flag that turns its
        default binding off.

        Hydra (MPICH): ``-bind-to core`` / ``-bind-to core:T``; Hydra (Intel
        MPI): ``-genv I_MPI_PIN on -genv I_MPI_PIN_CELL core -genv
        I_MPI_PIN_DOMAIN core`` (or ``T``: T cores), off: ``-genv I_MPI_PIN off``; PRRTE (Open MPI):
        ``--bind-to core`` / ``--map-by slot:PE=T --bind-to core``, off:
        ``--bind-to none``; srun: ``--cpus-per-task=T --cpu-bind=cores``, off:
        ``--cpu-bind=none``.
        """
        fits = cores_fit(P, threads, cores, bind)
        T = max(1, threads)
        if self.key == "mpich":
            return ["-bind-to", "core" if T == 1 else f"core:{T}"] if fits else []
        if self.key == "intel":
            if not fits:
                return ["-genv", "I_MPI_PIN", "off"]
            return ["-genv", "I_MPI_PIN", "on", "-genv", "I_MPI_PIN_CELL", "core",
                    "-genv", "I_MPI_PIN_DOMAIN", "core" if T == 1 else str(T)]
        if self.key == "openmpi":
            if not fits:
                return ["--bind-to", "none"]
            return ["--bind-to", "core"] if T == 1 else ["--map-by", f"slot:PE={T}", "--bind-to", "core"]
        return [f"--cpus-per-task={T}", "--cpu-bind=cores"] if fits else ["--cpu-bind=none"]

    def job_args(self) -> list[str]:
        """The flags a launch from a program needs beyond ``-n P``: Open MPI's
        mpiexec refuses to start as root without ``--allow-run-as-root`` and
        more ranks than cores without ``--oversubscribe`` (which only allows
        it: the mapping of ranks that fit is the same). The others need none."""
        if self.key != "openmpi":
            return []
        return (["--allow-run-as-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []) + ["--oversubscribe"]


def cores_fit(P: int, threads: int, cores: int, bind: bool = True) -> bool:
    """Whether ranks are bound to cores (:meth:`Launcher.bind_args`): ``bind``
    is on and ``P`` ranks of ``threads`` threads fit on ``cores`` cores."""
    return bool(bind) and threads >= 1 and P * threads <= cores


#: the launchers minips knows, by key (see :class:`Launcher`)
LAUNCHERS = {
    "mpich": Launcher("mpich", "Hydra", "MPICH", ("SIGTERM", "SIGINT", "SIGUSR1"), "SIGTERM",
                      "send SIGTERM (or Ctrl-C) to mpiexec, which forwards it to every rank", False),
    "intel": Launcher("intel", "Hydra", "Intel MPI", ("SIGTERM", "SIGINT", "SIGUSR1"), "SIGTERM",
                      "send SIGTERM (or Ctrl-C) to mpiexec, which forwards it to every rank", True),
    "openmpi": Launcher("openmpi", "PRRTE", "Open MPI", ("SIGUSR1",), "SIGUSR1",
                        "send SIGUSR1 to mpiexec (kill -USR1 PID), which forwards it to every rank; Open MPI's "
                        "mpiexec kills the ranks on SIGTERM and Ctrl-C", True),
    "srun": Launcher("srun", "srun", "any", ("SIGTERM", "SIGINT", "SIGUSR1"), "SIGTERM",
                     "send SIGTERM to the job's tasks (scancel --signal=TERM JOBID; at a time limit Slurm does it)",
                     True),
}


def rank_launcher(environ=None) -> Launcher | None:
    """The launcher that started this process, from the variables it gives
    every rank (read before MPI starts); None when none did (or an unknown one).

    Open MPI's (``PRTE_LAUNCHED``, or ``OMPI_COMM_WORLD_SIZE`` of its older
    ORTE), Intel MPI's Hydra (``I_MPI_HYDRA_UUID``, ``HYDRA_BSTRAP_*``),
    MPICH's Hydra (``HYDI_CONTROL_FD``, ``HYDRA_CONTROL_FD``,
    ``MPI_LOCALNRANKS``), then srun (``SLURM_STEP_ID`` with ``SLURM_PROCID``):
    an mpiexec inside a Slurm job passes the job's variables on to its ranks,
    so Slurm's are read last."""
    env = os.environ if environ is None else environ
    if "PRTE_LAUNCHED" in env or "OMPI_COMM_WORLD_SIZE" in env:
        return LAUNCHERS["openmpi"]
    if "I_MPI_HYDRA_UUID" in env or any(k.startswith("HYDRA_BSTRAP_") for k in env):
        return LAUNCHERS["intel"]
    if any(k in env for k in ("HYDI_CONTROL_FD", "HYDRA_CONTROL_FD", "MPI_LOCALNRANKS")):
        return LAUNCHERS["mpich"]
    if "SLURM_STEP_ID" in env and "SLURM_PROCID" in env:
        return LAUNCHERS["srun"]
    return None


def stop_hint() -> str:
    """How to stop this job with every rank's checkpoint, for a message: the
    hint of the launcher that started this process (:func:`rank_launcher`),
    or one that covers them all."""
    launcher = rank_launcher()
    if launcher is not None:
        return launcher.stop_hint
    return ("send SIGUSR1 to the launcher (every launcher forwards it to every rank); Hydra's mpiexec "
            "(MPICH, Intel MPI) and srun forward SIGTERM too")


@functools.lru_cache(maxsize=None)
def mpiexec_launcher(mpiexec: str) -> Launcher:
    """The launcher behind the program ``mpiexec`` (a path), from what its
    ``--version`` prints: "Open MPI" (PRRTE), "Intel(R) MPI" (Intel's Hydra),
    else Hydra of MPICH (which prints "HYDRA build details"; so do MVAPICH's
    and other MPICH derivatives). Asked once per path."""
    try:
        r = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=60)
        text = r.stdout + r.stderr
    except (OSError, subprocess.TimeoutExpired):
        text = ""
    if "Open MPI" in text or "OpenRTE" in text:
        return LAUNCHERS["openmpi"]
    if "Intel(R) MPI" in text:
        return LAUNCHERS["intel"]
    return LAUNCHERS["mpich"]


def library_version(MPI) -> str:
    """The first line of ``MPI_Get_library_version``, its runs of blanks made
    one space and without NUL characters (Open MPI's ends in one, which made
    a run's log a binary file to ``grep``)."""
    text = MPI.Get_library_version().replace("\x00", "")
    first = text.splitlines()[0] if text.strip() else ""
    return " ".join(first.split())


def thread_level_name(MPI, level: int) -> str:
    """``MPI_THREAD_FUNNELED`` and so on for a thread level of the ``MPI`` module."""
    for name in ("THREAD_SINGLE", "THREAD_FUNNELED", "THREAD_SERIALIZED", "THREAD_MULTIPLE"):
        if getattr(MPI, name, None) == level:
            return "MPI_" + name
    return f"level {level}"


def abort(MPI, mpi_comm, code: int) -> None:
    """End every rank of ``mpi_comm``'s job with status ``code`` (``MPI``: the
    ``mpi4py.MPI`` module of that communicator, or None).

    ``MPI_Abort``, except under Open MPI, whose ``MPI_Abort`` first has the
    launcher print a 10-line "MPI_ABORT was invoked" banner (after minips'
    one-line message, which has said it all): there the library's own abort,
    ``ompi_mpi_abort``, which ``MPI_Abort`` calls after that banner, is
    called directly (with no communicator: the whole job). Open MPI's
    mpiexec then still closes with its own 5-line report of the abort, which
    no rank can silence (it reports every job that ends with a non-zero
    status). Falls back to ``MPI_Abort`` where that function is not found."""
    get_vendor = getattr(MPI, "get_vendor", None)
    if get_vendor is not None and "open mpi" in get_vendor()[0].lower():
        fn = _ompi_mpi_abort()
        if fn is not None:
            fn(None, int(code))
    mpi_comm.Abort(code)


def _ompi_mpi_abort():
    """``ompi_mpi_abort`` of the Open MPI library this process has loaded, or None."""
    import ctypes
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "/libmpi.so" in line}
    except OSError:
        paths = set()
    for path in sorted(paths) or ["libmpi.so.40"]:
        try:
            lib = ctypes.CDLL(path, mode=getattr(os, "RTLD_NOLOAD", 0) | ctypes.RTLD_GLOBAL)
            fn = lib.ompi_mpi_abort
        except (OSError, AttributeError):
            continue
        fn.argtypes, fn.restype = [ctypes.c_void_p, ctypes.c_int], ctypes.c_int
        return fn
    return None


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
    # Open MPI 5 queries its osc/ucx component for every window, and for a shared-memory one (the
    # hierarchical allreduce's, minips' only window) it prints "OSC UCX component priority set inside
    # component query failed" on every rank; osc/sm serves that window. Read at MPI_Init, hence here.
    os.environ.setdefault("OMPI_MCA_osc", "^ucx")
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


def launcher_world(environ=None) -> tuple[int | None, int | None]:
    """(rank, size) of this process as its launcher's environment says (Hydra
    of MPICH and Intel MPI: ``PMI_RANK``/``PMI_SIZE``; Open MPI:
    ``OMPI_COMM_WORLD_RANK``/``_SIZE``, ``PMIX_RANK``; Slurm: ``SLURM_PROCID``/
    ``SLURM_NTASKS``), before MPI starts; None for what the environment does
    not say. ``environ``: another process's environment (default this one's)."""
    env = os.environ if environ is None else environ

    def first(*names):
        for n in names:
            try:
                return int(env[n])
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
