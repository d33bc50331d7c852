"""Data sets loaded once per process and shared read-only by its ranks.

Under ``mpiexec`` every rank loads its own copy of the data set. Virtual ranks
(:mod:`minips.distributed.comm.virtual`) are threads of one process: 128 copies
of full Fashion-MNIST (188 MB of float32 images each) would not fit, so while
a virtual job runs (:func:`shared_data`), :func:`cached` builds each data set
once, makes its arrays read-only (a rank that tried to write into the shared
data would fail loudly instead of changing every rank's) and hands the same
object to every rank. ``compare`` opens the same scope around its runs, so
that one data set serves every algorithm it trains (and their preflights)
instead of being read and normalised again for each. Outside such a scope
:func:`cached` just builds.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager

import numpy as np

__all__ = ["shared_data", "cached", "sharing"]

_lock = threading.Lock()
_scopes = 0
_cache: dict = {}   # key -> value
_building: dict = {}  # key -> lock held while one rank builds it


@contextmanager
def shared_data():
    """While inside, :func:`cached` shares what it builds; the cache is emptied
    when the last scope ends (scopes nest: a virtual job inside ``compare``)."""
    global _scopes
    with _lock:
        _scopes += 1
    try:
        yield
    finally:
        with _lock:
            _scopes -= 1
            if _scopes == 0:
                _cache.clear()
                _building.clear()


def sharing() -> bool:
    """Whether a virtual job shares data now."""
    return _scopes > 0


def _freeze(obj, seen=None) -> None:
    """Make every numpy array reachable through ``obj``'s attributes, tuples,
    lists and dicts read-only."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, np.ndarray):
        obj.flags.writeable = False
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _freeze(v, seen)
    elif isinstance(obj, dict):
        for v in obj.values():
            _freeze(v, seen)
    elif hasattr(obj, "__dict__") and not isinstance(obj, type):
        for v in vars(obj).values():
            _freeze(v, seen)


def cached(key, build):
    """``build()``, once per ``key`` while a virtual job shares data (the other
    ranks wait for the first and get the same object, its arrays read-only);
    otherwise simply ``build()``. ``key`` must name everything the result
    depends on (e.g. the file and its modification time)."""
    if not _scopes:
        return build()
    with _lock:
        if key in _cache:
            return _cache[key]
        gate = _building.setdefault(key, threading.Lock())
    with gate:
        with _lock:
            if key in _cache:
                return _cache[key]
        value = build()
        _freeze(value)
        with _lock:
            _cache[key] = value
        return value
