"""Distributed training algorithms, one small class each, one interface.

``make_algorithm(name, params, optimizer, comm, **options)`` builds one by name;
:data:`ALGORITHMS` lists them. See :mod:`minips.distributed.algorithms.base` for the
interface the Trainer drives.
"""
from __future__ import annotations

import inspect

from .base import Algorithm  # noqa: F401
from .sync import OverlapSyncSGD, SyncSGD

__all__ = ["ALGORITHMS", "algorithm_class", "make_algorithm", "Algorithm", "register"]

ALGORITHMS: dict[str, type] = {
    "sync": SyncSGD,
    "overlap-sync": OverlapSyncSGD,
}


def register(cls: type) -> type:
    """Class decorator: add an Algorithm subclass to :data:`ALGORITHMS` under ``cls.name``."""
    ALGORITHMS[cls.name] = cls
    return cls


def algorithm_class(name: str) -> type:
    """The Algorithm subclass registered as ``name``.

    Raises:
        ValueError: unknown name (valid ones listed).
    """
    _load_optional()
    if name not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {name!r}; choose one of {', '.join(ALGORITHMS)}")
    return ALGORITHMS[name]


def make_algorithm(name: str, params, optimizer, comm, **options) -> Algorithm:
    """Build the algorithm ``name`` with its options.

    Options that the algorithm does not take are ignored if they are None
    (so the CLI can pass every flag), and rejected otherwise.

    Raises:
        ValueError: unknown name (valid ones listed) or an option the algorithm
            does not accept (its valid options listed).
    """
    cls = algorithm_class(name)
    accepted = set(inspect.signature(cls.__init__).parameters) - {"self", "params", "optimizer", "comm"}
    given = {k: v for k, v in options.items() if v is not None}
    extra = sorted(set(given) - accepted)
    if extra:
        raise ValueError(f"algorithm {name!r} does not take option(s) {', '.join(extra)}; "
                         f"it takes: {', '.join(sorted(accepted)) or 'none'}")
    return cls(params, optimizer, comm, **given)


def _load_optional():
    """Import the modules that register further algorithms."""
    import importlib
    for mod in ("pseudo_sync", "local_sgd", "gossip", "compression"):
        try:
            importlib.import_module(f"{__name__}.{mod}")
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{mod}":
                raise
