"""Project the per-step time and weak-scaling efficiency of sync, overlap-sync
and pseudo-sync SGD to many nodes, from a measured single-node step and an
alpha-beta model of the interconnect.

Weak scaling: every node keeps the same per-node batch, so its compute per
step does not change with P; only communication does. The weak-scaling
efficiency is ``E(P) = T(1) / T(P)`` (1 = perfect), with T the step time of
the same algorithm.

**Assumptions** (each one is a parameter or a function below; change it there):

1. *One rank per node*, and the per-node compute time (forward, backward,
   update, predictor, other) is the one measured on one node, independent of P
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
5. *overlap-sync* posts one allreduce per bucket during backward (Horovod,
   PyTorch DDP). Buckets are sent one after the other (the network carries one
   at a time); all of backward is available to hide them except the last
   bucket, which is ready only when backward ends. Each bucket pays the latency
   term. :func:`step_time_overlap_sync`.
6. *pseudo-sync* posts the whole gradient after backward and waits for it one
   step later (k steps later for staleness k): the allreduce has a whole step
   of compute to hide behind. The network still carries one allreduce at a
   time, so in steady state a step lasts at least one allreduce, for any k.
   :func:`step_time_pseudo_sync`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from .costmodel import NetworkModel, check_allreduce_args, parse_network, ring_allreduce_time

__all__ = ["StepProfile", "rabenseifner_allreduce_time", "allreduce_time", "step_time_sync",
           "step_time_overlap_sync", "step_time_pseudo_sync", "STEP_TIME", "weak_scaling_efficiency",
           "project", "interference_from_overlap"]


@dataclass(frozen=True)
class StepProfile:
    """What one node spends per training step, measured without communication.

    Attributes (seconds per step unless stated):
        forward, backward: the compute phases.
        update: the optimizer.
        predict: the gradient predictor (pseudo-sync only; 0 for sync).
        other: the rest of the iteration (data slicing, logging).
        grad_bytes: bytes of the gradient allreduced each step (4 x parameters).
        buckets: bytes of each overlap-sync bucket, in backward order (sums to
            ``grad_bytes``); empty = one bucket.

    Raises:
        ValueError: a negative time, or buckets that do not sum to grad_bytes.
    """
    forward: float
    backward: float
    update: float = 0.0
    predict: float = 0.0
    other: float = 0.0
    grad_bytes: float = 0.0
    buckets: tuple = field(default_factory=tuple)

    def __post_init__(self):
        for name in ("forward", "backward", "update", "predict", "other", "grad_bytes"):
            if getattr(self, name) < 0:
                raise ValueError(f"StepProfile.{name} must be >= 0, got {getattr(self, name)}")
        if self.buckets and not math.isclose(sum(self.buckets), self.grad_bytes, rel_tol=1e-9):
            raise ValueError(f"StepProfile: buckets sum to {sum(self.buckets)} bytes, grad_bytes is {self.grad_bytes}")

    @property
    def compute(self) -> float:
        """Seconds of everything but communication and the predictor."""
        return self.forward + self.backward + self.update + self.other

    @classmethod
    def from_summary(cls, summary: dict, grad_bytes: float, buckets=(), include_other: bool = True) -> "StepProfile":
        """From a ``summary.json`` of ``train`` (its ``time_breakdown`` and
        ``step_time_s``); ``other`` = step time minus the phases, minus wait
        and post (so a summary from a multi-rank run gives its compute only)."""
        b = summary["time_breakdown"]
        phases = sum(b.values())
        other = max(0.0, summary["step_time_s"] - phases) if include_other else 0.0
        return cls(forward=b["forward"], backward=b["backward"], update=b["update"], predict=b.get("predict", 0.0),
                   other=other, grad_bytes=float(grad_bytes), buckets=tuple(float(x) for x in buckets))


def rabenseifner_allreduce_time(nbytes: float, P: int, alpha: float, beta: float) -> float:
    """Seconds for Rabenseifner's allreduce (recursive-halving reduce-scatter +
    recursive-doubling allgather) for a power-of-two ``P``:
    ``2 log2(P) alpha + 2 (P-1)/P n beta`` (Thakur, Rabenseifner & Gropp 2005;
    non-powers of two pay an extra step, ignored here). 0 for P = 1.

    Raises:
        ValueError: P < 1 or negative sizes/parameters.
    """
    check_allreduce_args(nbytes, P, alpha, beta)
    if P == 1:
        return 0.0
    return 2 * math.log2(P) * alpha + 2 * (P - 1) / P * nbytes * beta


def allreduce_time(nbytes: float, P: int, net, algorithm: str = "ring") -> float:
    """Allreduce seconds of ``nbytes`` over ``P`` nodes on ``net`` (a
    :class:`NetworkModel` or a name/``alpha=..,beta=..`` string);
    ``algorithm`` is ``ring`` or ``rabenseifner``.

    Raises:
        ValueError: unknown algorithm or network.
    """
    net = parse_network(net)
    if algorithm == "ring":
        return ring_allreduce_time(nbytes, P, net.alpha, net.beta)
    if algorithm == "rabenseifner":
        return rabenseifner_allreduce_time(nbytes, P, net.alpha, net.beta)
    raise ValueError(f"unknown allreduce algorithm {algorithm!r}; use ring or rabenseifner")


def _check_phi(interference: float) -> None:
    if not 0 <= interference <= 1:
        raise ValueError(f"interference must be in [0, 1] (0 = offloaded, 1 = on the compute cores), "
                         f"got {interference}")


def step_time_sync(profile: StepProfile, P: int, net, algorithm: str = "ring") -> float:
    """Blocking allreduce after backward: ``T = compute + A(P)`` (seconds).
    Nothing overlaps, so interference does not matter."""
    return profile.compute + allreduce_time(profile.grad_bytes, P, net, algorithm)


def step_time_overlap_sync(profile: StepProfile, P: int, net, interference: float = 0.0,
                           algorithm: str = "ring") -> float:
    """Per-bucket allreduce posted during backward (assumption 5)::

        A_b     = allreduce time of bucket b (each pays the latency term)
        A_total = sum of A_b;  A_last = the last bucket's (ready when backward ends)
        hidden  = min(A_total - A_last, backward)      communication under backward
        T       = compute + phi * hidden + (A_total - hidden)

    Seconds. With one bucket nothing is hidden and it equals sync.

    Raises:
        ValueError: interference outside [0, 1].
    """
    _check_phi(interference)
    buckets = profile.buckets or (profile.grad_bytes,)
    times = [allreduce_time(b, P, net, algorithm) for b in buckets]
    total, last = sum(times), times[-1]
    hidden = min(total - last, profile.backward)
    return profile.compute + interference * hidden + (total - hidden)


def step_time_pseudo_sync(profile: StepProfile, P: int, net, interference: float = 0.0,
                          algorithm: str = "ring") -> float:
    """Allreduce of step t hidden behind step t+1 (assumption 6)::

        C = compute + predict;  A = allreduce time of the whole gradient
        T = C + phi * min(A, C) + max(0, A - C)

    Seconds. With phi = 0, ``T = max(C, A)``; with phi = 1, ``T = C + A``
    (sync plus the predictor's cost). The staleness k does not change the
    steady state (the network carries one allreduce at a time).

    Raises:
        ValueError: interference outside [0, 1].
    """
    _check_phi(interference)
    C = profile.compute + profile.predict
    A = allreduce_time(profile.grad_bytes, P, net, algorithm)
    return C + interference * min(A, C) + max(0.0, A - C)


#: algorithm name -> step-time function(profile, P, net, interference, algorithm)
STEP_TIME = {
    "sync": lambda prof, P, net, phi=0.0, alg="ring": step_time_sync(prof, P, net, alg),
    "overlap-sync": lambda prof, P, net, phi=0.0, alg="ring": step_time_overlap_sync(prof, P, net, phi, alg),
    "pseudo-sync": lambda prof, P, net, phi=0.0, alg="ring": step_time_pseudo_sync(prof, P, net, phi, alg),
}


def weak_scaling_efficiency(t1: float, tP: float) -> float:
    """``E(P) = T(1) / T(P)`` for weak scaling (same per-node batch).

    Raises:
        ValueError: a non-positive time.
    """
    if t1 <= 0 or tP <= 0:
        raise ValueError(f"step times must be > 0, got T(1)={t1}, T(P)={tP}")
    return t1 / tP


def project(profiles: dict, net, Ps, interference: float = 0.0, algorithm: str = "ring") -> dict:
    """Step time and E(P) of each algorithm at each P.

    Args:
        profiles: label -> :class:`StepProfile` (pseudo-sync's includes the
            predictor cost); the part of the label before the first ``:`` is
            the algorithm (a key of :data:`STEP_TIME`), e.g. ``sync`` or
            ``pseudo-sync:adaptive``.
        net: the interconnect (NetworkModel, preset name or ``alpha=..,beta=..``).
        Ps: node counts (each >= 1).
        interference: phi of assumption 4.
        algorithm: ``ring`` or ``rabenseifner``.

    Returns:
        ``{algo: {"P": [...], "step_s": [...], "efficiency": [...], "comm_s": [...]}}``
        where T(1) is the algorithm's own step time on one node (no communication)
        and ``comm_s`` the whole-gradient allreduce time. When ``sync`` is among
        the profiles, each algorithm also gets ``vs_sync_1`` = T_sync(1) / T(P):
        its throughput per node relative to plain SGD on one node (the
        predictor's cost, invisible in E(P) because it is in T(1) too, shows here).

    Raises:
        ValueError: unknown algorithm, P < 1.
    """
    out = {}
    for algo, prof in profiles.items():
        if algo.split(":")[0] not in STEP_TIME:
            raise ValueError(f"no step-time model for {algo!r}; known: {', '.join(STEP_TIME)}")
        f = STEP_TIME[algo.split(":")[0]]
        t1 = f(prof, 1, net, interference, algorithm)
        rows = {"P": [], "step_s": [], "efficiency": [], "comm_s": []}
        for P in Ps:
            if P < 1:
                raise ValueError(f"P must be >= 1, got {P}")
            tP = f(prof, P, net, interference, algorithm)
            rows["P"].append(int(P))
            rows["step_s"].append(tP)
            rows["efficiency"].append(weak_scaling_efficiency(t1, tP))
            rows["comm_s"].append(allreduce_time(prof.grad_bytes, P, net, algorithm))
        out[algo] = rows
    if "sync" in out:
        t1_sync = out["sync"]["step_s"][out["sync"]["P"].index(1)] if 1 in out["sync"]["P"] else \
            STEP_TIME["sync"](profiles["sync"], 1, net, interference, algorithm)
        for rows in out.values():
            rows["vs_sync_1"] = [t1_sync / t for t in rows["step_s"]]
    return out


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
