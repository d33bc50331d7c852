"""Project the per-step time and weak-scaling efficiency of any registered
algorithm to many nodes, from a measured single-node step and an alpha-beta
model of the interconnect.

Each algorithm carries its own cost model (``step_time`` next to its update
rule in :mod:`minips.distributed.algorithms`; :func:`step_time` asks it for one
P); the measured profile (:class:`StepProfile`) and the allreduce models live
below the algorithms in :mod:`minips.distributed.costmodel` and are re-exported
here. This module is a lab: it sits above the algorithms and adds the
efficiency arithmetic over many P and many algorithms.

Weak scaling: every node keeps the same per-node batch, so its compute per
step does not change with P; only communication does. The weak-scaling
efficiency is ``E(P) = T(1) / T(P)`` (1 = perfect), with T the step time of
the same algorithm.

**Assumptions** (each one is a parameter or a function below; change it there):

1. *One rank per node* unless ``ranks_per_node`` R says otherwise (then P =
   N R ranks on N nodes, each rank computing its own batch on its own core:
   the measured one-rank profile is per rank; the allreduce is the flat ring
   or the hierarchical one of :mod:`~minips.distributed.costmodel`, with the
   node's memory as :class:`~minips.distributed.costmodel.SharedMemoryModel`),
   and the per-node compute time (forward, backward,
   update, other, and the algorithm's own extra compute) is the one measured on one node, independent of P
   (:class:`StepProfile`). Stragglers, OS noise and data loading at scale are
   ignored (they lower the real efficiency).
2. *The allreduce is a ring* (reduce-scatter + allgather;
   :func:`~minips.distributed.costmodel.ring_allreduce_time`, Thakur, Rabenseifner &
   Gropp 2005): ``2(P-1) alpha + 2(P-1)/P n beta``. The reduction arithmetic is
   not modelled separately (a fitted alpha/beta absorb it). The latency term
   grows linearly in P; MPICH switches to recursive doubling / Rabenseifner's
   algorithm (``2 log2(P) alpha + ...``, :func:`rabenseifner_allreduce_time`)
   when that is cheaper, so the ring is pessimistic at very large P for small
   messages.
3. *Network parameters* are nominal (link signalling rate and a typical MPI
   latency for the class of network: :data:`~minips.distributed.costmodel.NETWORKS`)
   or fitted on a real machine with ``bench comm``. No contention from other
   jobs, a full-bisection fat tree (the ring's neighbour links never share a
   wire).
4. *Overlap* is ideal unless told otherwise: a nonblocking allreduce progresses
   in the background (RDMA NIC / offloaded collectives, or a spare core) at no
   cost to compute. ``interference`` (phi in [0, 1]) charges the fraction phi of
   the overlapped communication time to compute: phi = 0 is an offloading NIC,
   phi = 1 a node where the reduction runs on the cores that compute (a 2-core
   laptop with shared-memory MPI: overlap then saves nothing).
5. *The network carries one message or collective at a time*: requests
   posted while another is on the wire wait for it.
6. What an algorithm overlaps, and with what, is its own model's business
   (``Algorithm.step_time``; e.g. per-bucket allreduce hidden behind backward,
   or the whole allreduce behind the next step).
"""
from __future__ import annotations

from ..distributed.algorithms import resolve, step_time
from ..distributed.costmodel import (ALLREDUCE_PATHS, Interconnect, SharedMemoryModel, StepProfile, allreduce_time,
                                     parse_network, rabenseifner_allreduce_time)

__all__ = ["ALLREDUCE_PATHS", "StepProfile", "rabenseifner_allreduce_time", "allreduce_time", "step_time",
           "weak_scaling_efficiency", "project", "project_nodes", "overtakes_at", "interference_from_overlap"]


def weak_scaling_efficiency(t1: float, tP: float) -> float:
    """``E(P) = T(1) / T(P)`` for weak scaling (same per-node batch).

    Raises:
        ValueError: a non-positive time.
    """
    if t1 <= 0 or tP <= 0:
        raise ValueError(f"step times must be > 0, got T(1)={t1}, T(P)={tP}")
    return t1 / tP


def project(profiles: dict, net, Ps, interference: float = 0.0, algorithm: str = "ring",
            baseline: str | None = None) -> dict:
    """Step time and E(P) of each algorithm at each P.

    Args:
        profiles: algorithm spec (e.g. ``sync`` or ``local-sgd:period=8@ls8``)
            -> :class:`StepProfile` (with the algorithm's own extras, e.g. its
            extra compute per step).
        net: the interconnect (NetworkModel, preset name or ``alpha=..,beta=..``).
        Ps: node counts (each >= 1).
        interference: phi of assumption 4.
        algorithm: ``ring`` or ``rabenseifner``.

    Returns:
        ``{algo: {"P": [...], "step_s": [...], "efficiency": [...], "comm_s": [...]}}``
        where T(1) is the algorithm's own step time on one node (no communication)
        and ``comm_s`` the whole-gradient allreduce time. With ``baseline`` (a
        key of ``profiles``, e.g. ``sync``), each algorithm also gets
        ``vs_baseline_1`` = T_baseline(1) / T(P): its throughput per node relative
        to the baseline on one node (an algorithm's own extra compute, invisible
        in E(P) because it is in T(1) too, shows here), and ``overtakes_at``:
        the smallest P of ``Ps`` from which on its step is below the
        baseline's (see :func:`overtakes_at`; None if it never is).

    Raises:
        ValueError: unknown algorithm, P < 1.
    """

    out = {}
    specs = {}
    for algo in profiles:
        try:
            specs[algo] = resolve(algo)
        except ValueError as e:
            raise ValueError(f"no step-time model for {algo!r}: {e}") from None
    for algo, prof in profiles.items():
        t1 = step_time(specs[algo], prof, 1, net, interference, algorithm)
        rows = {"P": [], "step_s": [], "efficiency": [], "comm_s": []}
        for P in Ps:
            tP = step_time(specs[algo], prof, P, net, interference, algorithm)
            rows["P"].append(int(P))
            rows["step_s"].append(tP)
            rows["efficiency"].append(weak_scaling_efficiency(t1, tP))
            rows["comm_s"].append(allreduce_time(prof.grad_bytes, P, net, algorithm))
        out[algo] = rows
    if baseline is not None and baseline in out:
        t1_base = step_time(specs[baseline], profiles[baseline], 1, net, interference, algorithm)
        for rows in out.values():
            rows["vs_baseline_1"] = [t1_base / t for t in rows["step_s"]]
            rows["overtakes_at"] = overtakes_at(rows, out[baseline])
    return out


def project_nodes(profiles: dict, net, nodes, ranks_per_node: int, path: str, interference: float = 0.0,
                  shm: SharedMemoryModel | None = None) -> dict:
    """Weak scaling over nodes of ``ranks_per_node`` R ranks, with the ``path``
    (``flat`` or ``hierarchical``) ring allreduce.

    Args:
        profiles: algorithm spec -> :class:`StepProfile` (one rank's step on one core).
        net: the inter-node interconnect; ``shm``: the node's memory.
        nodes: node counts N (each >= 1); the job has P = N R ranks.

    Returns:
        ``{algo: {"nodes": [...], "P": [...], "step_s": [...], "efficiency": [...],
        "comm_s": [...]}}`` with ``efficiency`` = T(1 rank) / T(P) (weak
        scaling against one rank alone, which communicates nothing) and
        ``comm_s`` the whole-gradient allreduce.

    Raises:
        ValueError: unknown algorithm, path or network, N or R < 1.
    """

    net = parse_network(net)
    link = Interconnect(net, "ring", ranks_per_node, path, shm)
    out = {}
    for algo, prof in profiles.items():
        spec = resolve(algo)
        t1 = step_time(spec, prof, 1, net, interference)
        rows = {"nodes": [], "P": [], "step_s": [], "efficiency": [], "comm_s": []}
        for N in nodes:
            if N < 1:
                raise ValueError(f"node counts must be >= 1, got {N}")
            P = int(N) * int(ranks_per_node)
            tP = step_time(spec, prof, P, net, interference, "ring", ranks_per_node, path, shm)
            rows["nodes"].append(int(N))
            rows["P"].append(P)
            rows["step_s"].append(tP)
            rows["efficiency"].append(weak_scaling_efficiency(t1, tP))
            rows["comm_s"].append(link.allreduce_time(prof.grad_bytes, P))
        out[algo] = rows
    return out


def overtakes_at(rows: dict, base: dict):
    """The smallest P from which on (every larger P of the projection too) the
    step of ``rows`` is shorter than the baseline's, e.g. where gossip
    overtakes allreduce; None if not at the largest P. Both are rows of
    :func:`project` over the same Ps."""
    at = None
    for P, t, tb in zip(reversed(rows["P"]), reversed(rows["step_s"]), reversed(base["step_s"])):
        if t >= tb:
            break
        at = P
    return at


def interference_from_overlap(compute_alone: float, compute_with_comm: float, wait_after: float,
                              allreduce_alone: float) -> float:
    """Estimate phi (assumption 4) from an overlap measurement (``bench comm``):
    compute alone took ``compute_alone``, the allreduce alone ``allreduce_alone``;
    with the allreduce posted first, compute took ``compute_with_comm`` and the
    wait after it ``wait_after``. The model says the overlapped total is
    ``C + phi * min(A, C) + max(0, A - C)``, so::

        phi = (compute_with_comm + wait_after - max(C, A)) / min(A, C)

    clipped to [0, 1]: 0 = the allreduce was completely hidden at no cost,
    1 = it saved nothing against doing the two one after the other (the
    reduction did not progress, or it took the compute's cores).

    Raises:
        ValueError: non-positive times.
    """
    if compute_alone <= 0 or allreduce_alone <= 0:
        raise ValueError("compute_alone and allreduce_alone must be > 0")
    C, A = compute_alone, allreduce_alone
    phi = (compute_with_comm + wait_after - max(C, A)) / min(A, C)
    return float(min(1.0, max(0.0, phi)))
