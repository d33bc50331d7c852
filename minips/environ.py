"""The environment switches minips reads while it runs, one copy per rank.

Under ``mpiexec`` every rank is a process with its own environment. Virtual
ranks (:mod:`minips.distributed.comm.virtual`) are threads of one process, so
each gets its own copy of ``os.environ``, taken when the job starts
(:func:`begin_rank`); :func:`get` reads the calling rank's copy, and
:func:`set` changes it for that rank only. Outside a virtual rank both act
on ``os.environ`` itself.

Read through here: ``MINIPS_REFERENCE_KERNELS`` (:func:`minips.kernels.reference_kernels`,
read at every kernel call).
"""
from __future__ import annotations

import os
import threading

__all__ = ["get", "set", "begin_rank", "end_rank"]

_rank = threading.local()  # .env: the calling virtual rank's environment (a dict), if any


def get(name: str, default: str | None = None) -> str | None:
    """The value of ``name`` in the calling rank's environment (or ``os.environ``)."""
    env = getattr(_rank, "env", None)
    return (env if env is not None else os.environ).get(name, default)


def set(name: str, value: str | None) -> None:  # noqa: A001 - the module is used as environ.set
    """Set (or with None remove) ``name`` in the calling rank's environment (or ``os.environ``)."""
    env = getattr(_rank, "env", None)
    env = env if env is not None else os.environ
    if value is None:
        env.pop(name, None)
    else:
        env[name] = str(value)


def begin_rank(env: dict) -> None:
    """Give the calling thread (a virtual rank) its own copy of ``env``."""
    _rank.env = dict(env)


def end_rank() -> None:
    """The calling thread reads ``os.environ`` again."""
    _rank.env = None
