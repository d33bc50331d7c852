"""Averaging methods: how n nodes, each holding a value, agree on the mean
by talking to neighbours only. These are not training algorithms (they are
not in the ALGORITHMS registry); ``python -m minips gossip-lab`` runs them on
a vectorised cluster (all nodes in one process) or under MPI (one node per rank)
and reports the error per round (docs/gossip.md).

One module per method:

========================  =======================================================
``plain``                 synchronous gossip ``x <- W x`` (:mod:`.plain`)
``pairwise``              randomized pairwise gossip, Boyd et al. 2006 (:mod:`.pairwise`)
``accelerated``           shift-register gossip, Liu et al. 2013 (:mod:`.accelerated`)
``periodic``              periodic gossiping along an edge schedule, Yu et al. (:mod:`.periodic`)
``aco-local/aco-global``  ACO-guided partners, Janecek & Gansterer 2016, reconstruction (:mod:`.aco`)
``push-sum``              push-sum, Kempe et al. 2003, directed / time-varying graphs (:mod:`.push_sum`)
========================  =======================================================
"""
from __future__ import annotations


from ..options import convert_value, fields_of, type_hints
from .accelerated import AcceleratedGossip
from .aco import ACOGossip
from .pairwise import RandomizedGossip
from .periodic import PeriodicGossip
from .plain import SynchronousGossip
from .push_sum import PushSum

__all__ = ["METHODS", "make_method", "method_options"]

#: method name -> (class, fixed keyword options); the options a method takes: its class's ``Options``
METHODS = {
    "plain": (SynchronousGossip, {}),
    "pairwise": (RandomizedGossip, {}),
    "accelerated": (AcceleratedGossip, {}),
    "periodic": (PeriodicGossip, {}),
    "aco-local": (ACOGossip, {"knowledge": "local"}),
    "aco-global": (ACOGossip, {"knowledge": "global"}),
    "push-sum": (PushSum, {}),
}

def method_options(name: str) -> dict:
    """``{option: default}`` of method ``name``: the fields of its class's ``Options``
    (what ``gossip-lab`` passes to it; a fixed option of its row, such as ACO's
    ``knowledge``, is not one)."""
    return fields_of(METHODS[name][0].Options)


def make_method(name: str, graph, seed: int = 0, **options):
    """The method ``name`` on ``graph``; ``options`` not meant for it (None
    values) are dropped, others raise. Each value is typed by its ``Options``
    field (:func:`minips.options.convert_value`: ``"0.5"`` and 0.5 are the same alpha).

    Raises:
        ValueError: unknown name, an option the method does not take, a value
            of the wrong type, or the method's own checks.
    """
    if name not in METHODS:
        raise ValueError(f"unknown --method {name!r}; choose one of {', '.join(METHODS)}")
    cls, fixed = METHODS[name]
    given = {k: v for k, v in options.items() if v is not None}
    extra = sorted(set(given) - set(method_options(name)))
    if extra:
        flags = ", ".join("--" + k.replace("_", "-") for k in extra)
        raise ValueError(f"--method {name} does not take {flags}")
    hints = type_hints(cls.Options)
    typed = {k: convert_value(v, hints[k], "--" + k.replace("_", "-")) for k, v in given.items()}
    return cls(graph, seed=seed, **fixed, **typed)
