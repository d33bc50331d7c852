"""The step-time model of weak scaling: predicted against measured step times at the measured P
(:func:`model_check`) and E(P) projected to many nodes (:func:`projection`,
:func:`node_projection`), from the measured rows and :mod:`minips.labs.projection`."""
from __future__ import annotations


from ...distributed.algorithms import BASELINE
from .measure import ScalingError, parse_algos, read_json_file

__all__ = ["reported_points", "grad_layout", "own_compute", "model_check", "projection", "PROJECT_NODES",
           "PROJECT_RANKS_PER_NODE", "node_projection", "project_also", "family_of", "comm_fit"]


def reported_points() -> dict:
    """Weak-scaling efficiencies the registered algorithms' papers report:
    ``{"name (where)": {P: E(P)}}`` (from each class's ``reported_efficiency``)."""
    from ...distributed.algorithms import ALGORITHMS
    return {f"{name}, {cls.reported_efficiency[0]}": dict(cls.reported_efficiency[1])
            for name, cls in ALGORITHMS.items() if getattr(cls, "reported_efficiency", None)}


def grad_layout(model: str, data: str) -> tuple[int, list[tuple]]:
    """(gradient bytes, parameter shapes in the model's order) of ``model``."""
    from ...models import build_model
    from ...tasks import make_task

    params = build_model(model, make_task(data)).parameters()
    return 4 * sum(p.size for p in params), [tuple(p.shape) for p in params]


def _profile(row: dict, grad_bytes: int, spec: str | None = None, shapes=(), flags=None, phases=None):
    """The StepProfile of a measured ``row`` (its summary), with the extras
    the algorithm of ``spec`` reads (``Algorithm.profile_extras``, from the
    model's ``shapes`` and ``phases``, default the row's own breakdown); none
    without a spec."""
    from ...labs.projection import StepProfile
    return StepProfile.from_summary(row, grad_bytes, extras=_extras(spec, shapes, flags, row["time_breakdown"]
                                                                    if phases is None else phases))


def _extras(spec: str | None, shapes, flags, phases: dict) -> dict:
    """What the algorithm of ``spec`` (with the older per-option ``flags`` as
    defaults) reads from a StepProfile, from the model's ``shapes`` and the
    measured seconds per phase ``phases``."""
    from ...distributed.algorithms import resolve
    if spec is None:
        return {}
    try:
        a = resolve(spec, flags)
    except ValueError:  # an old JSON's free-form label
        return {}
    return a.cls.profile_extras(a.options, shapes, phases)


def own_compute(row: dict) -> float:
    """Seconds per step the algorithm computes beyond forward, backward and the
    optimizer (its predictor, compressor, mixing...): every other timed phase
    except communication."""
    return sum(v for k, v in row["time_breakdown"].items()
               if k not in ("forward", "backward", "update", "post", "wait"))


def model_check(rows: list[dict], grad_bytes: int, shapes=(), fit_net=None, interference: float = 1.0,
                flags=None) -> list[dict]:
    """Predicted vs measured step time at each measured P > 1, from the P = 1
    profile of the same algorithm and (a) the measured blocking allreduce time
    at that P, (b) the fitted network ``fit_net`` (if given). ``shapes``: the
    model's parameter shapes; ``flags``: the older per-option flags the runs
    were given (both for the algorithm's profile extras)."""
    from ...distributed.costmodel import NetworkModel
    from ...labs.projection import step_time

    out = []
    for r in rows:
        base = next((b for b in rows if b["label"] == r["label"] and b["P"] == 1), None)
        if r["P"] == 1 or base is None:
            continue
        prof = _profile(base, grad_bytes, _spec_of(r), shapes, flags)
        def f(profile, P, net, phi, spec=r["algo"]):
            return step_time(spec, profile, P, net, phi)
        res = {"P": r["P"], "label": r["label"], "measured_s": r["step_time_s"], "interference": interference}
        if r.get("comm_alone_s"):
            # A network whose ring time at this P equals the measured allreduce:
            # pure bandwidth term, so buckets scale with their size.
            nb = 2 * (r["P"] - 1) / r["P"] * grad_bytes
            net = NetworkModel(0.0, r["comm_alone_s"] / nb, "measured")
            res["predicted_measured_comm_s"] = f(prof, r["P"], net, interference)
            res["comm_alone_s"] = r["comm_alone_s"]
            # The same, with the compute measured at this P (isolates the
            # communication model from the compute slowing down on a shared node).
            own = _profile(r, grad_bytes, _spec_of(r), shapes, flags)
            res["predicted_own_compute_s"] = f(own, r["P"], net, interference)
            res["compute_s"], res["compute_P1_s"] = own.compute + own_compute(r), prof.compute + own_compute(base)
        if fit_net is not None:
            res["predicted_fit_s"] = f(prof, r["P"], fit_net, interference)
            res["fit_comm_s"] = fit_net.allreduce_time(grad_bytes, r["P"])
        out.append(res)
    return out


def _spec_of(row: dict) -> str:
    """The algorithm spec a measured row ran: its ``algo`` (a spec since the
    plug-in redesign). Older JSON files hold the bare name there and the spec
    in ``label`` (e.g. ``pseudo-sync`` and ``pseudo-sync:adaptive``)."""
    from ...distributed.algorithms import resolve
    algo, label = row["algo"], row.get("label")
    if ":" not in algo and label and label != algo:
        try:
            resolve(label)
            return label
        except ValueError:  # a free-form label (@LABEL): the name is all there is
            pass
    return algo


def _same_algorithm(a: str, b: str) -> bool:
    """Whether two specs resolve to the same algorithm with the same options."""
    from ...distributed.algorithms import resolve
    try:
        ra, rb = resolve(a), resolve(b)
    except ValueError:  # an old JSON's free-form label
        return False
    return ra.cls is rb.cls and ra.options == rb.options


def projection(rows: list[dict], grad_bytes: int, shapes, networks, Ps, interference: float = 0.0,
               also=(), flags=None) -> dict:
    """E(P) per network and algorithm (see :func:`minips.labs.projection.project`).

    At P = 1 every algorithm computes the same thing, and their measured
    compute differs only by noise; so all share one compute profile (forward,
    backward, update, other: the baseline's P = 1 row, else the first P = 1 row),
    and each adds what its cost model reads beyond it (``Algorithm.profile_extras``
    from its own measured phases and the model's parameter ``shapes``, e.g. its
    extra compute or its buckets; ``flags``: the older per-option flags the
    runs were given).
    ``also``: further algorithm specs projected from that shared profile with
    no measured extra compute (not measured; what their model computes itself,
    e.g. compression at its per-entry cost, is in their ``step_time``), unless
    one resolves to the same algorithm and options as a measured row: then it
    gets that row's extras."""
    from ...distributed.costmodel import parse_network
    from ...labs.projection import project

    profiles, baseline = _profiles(rows, grad_bytes, shapes, also, flags)
    out = {}
    for name in networks:
        net = parse_network(name)
        out[name] = {"network": str(net), "alpha_s": net.alpha, "beta_s_per_byte": net.beta,
                     "baseline": baseline, "algos": project(profiles, net, Ps, interference, baseline=baseline)}
    return out


def _profiles(rows, grad_bytes, shapes, also=(), flags=None):
    """(spec -> StepProfile, baseline spec or None) for the projections: see :func:`projection`."""
    import dataclasses

    ones = [r for r in rows if r["P"] == 1]
    if not ones:
        raise ScalingError("the projection needs a P = 1 measurement: include 1 in --ranks")
    base = _profile(next((r for r in ones if r["algo"] == BASELINE), ones[0]), grad_bytes)  # the shared compute
    profiles = {_spec_of(r): dataclasses.replace(base, extras=_extras(_spec_of(r), shapes, flags, r["time_breakdown"]))
                for r in ones}
    for spec in also:
        # a spec written differently from a measured one (the same algorithm and options) is the
        # same algorithm: it gets that run's measured extras, not none
        twin = next((m for m in list(profiles) if _same_algorithm(m, spec)), None)
        profiles.setdefault(spec, profiles[twin] if twin else
                            dataclasses.replace(base, extras=_extras(spec, shapes, flags, {})))
    return profiles, (BASELINE if BASELINE in profiles else None)


#: nodes and ranks per node of ``--project`` (the seed paper ran 128 nodes; CPU nodes have 24-96 cores)
PROJECT_NODES = (1, 2, 4, 8, 16, 32, 64, 128)
PROJECT_RANKS_PER_NODE = (24, 48, 96)


def node_projection(rows: list[dict], grad_bytes: int, shapes, networks, nodes=PROJECT_NODES,
                    ranks_per_node=PROJECT_RANKS_PER_NODE, interference: float = 0.0, also=(), flags=None,
                    shm=None) -> dict:
    """``--project``: E over N nodes of R ranks each (P = N R ranks, a rank per
    core), flat and hierarchical allreduce, for every network, R and algorithm
    (:func:`minips.labs.projection.project_nodes`); each rank computes
    the measured one-rank step (the profiles of :func:`projection`).

    Returns:
        ``{network: {"network": str, "shared_memory": str, "rows": [{"algo", "ranks_per_node",
        "allreduce", "nodes", "P", "efficiency", "step_s", "comm_s"}, ...]}}``.
    """
    from ...distributed.costmodel import SHARED_MEMORY, parse_network
    from ...labs.projection import ALLREDUCE_PATHS, project_nodes

    shm = shm or SHARED_MEMORY
    profiles, _ = _profiles(rows, grad_bytes, shapes, also, flags)
    out = {}
    for name in networks:
        net = parse_network(name)
        table = []
        for R in ranks_per_node:
            for path in ALLREDUCE_PATHS:
                for algo, r in project_nodes(profiles, net, nodes, R, path, interference, shm).items():
                    table.append({"algo": algo, "ranks_per_node": R, "allreduce": path, **r})
        out[name] = {"network": str(net), "shared_memory": str(shm), "shared_memory_alpha_s": shm.alpha,
                     "shared_memory_bandwidth_Bps": shm.bandwidth, "rows": table}
    return out


def project_also(spec: str | None, rows: list[dict]) -> list[str]:
    """The ``--project-also`` specs: a comma-separated list, or ``all`` for
    every registered algorithm (its default options) whose name was not
    measured, in the registry's order (families together).

    Raises:
        ScalingError: an entry that is not a valid spec.
    """
    if not spec:
        return []
    if spec.strip() == "all":
        from ...distributed.algorithms import ALGORITHMS, resolve
        measured = {resolve(_spec_of(r)).name for r in rows}
        return [name for name in ALGORITHMS if name not in measured]
    return [e["algo"] for e in parse_algos(spec)]


def family_of(spec: str) -> str:
    """The family of the algorithm a spec names; ``"other"`` for a free-form label of an old JSON."""
    from ...distributed.algorithms import ALGORITHMS, resolve
    try:
        return ALGORITHMS[resolve(spec).name].family
    except ValueError:  # an old JSON's free-form label
        return "other"


def comm_fit(path):
    """(NetworkModel of the fit, phi from the poll-mode overlap or None) of a bench comm JSON."""
    from ...distributed.costmodel import NetworkModel
    from ...labs.projection import interference_from_overlap

    c = read_json_file(path, "--comm-json", "fit", "bench comm --json FILE")
    if not c.get("fit"):
        raise ScalingError(f"{path} has no fit: run bench comm under mpiexec -n 2 or more (without --overlap-only)")
    net = NetworkModel(c["fit"]["alpha_s"], c["fit"]["beta_s_per_byte"], f"fit of {path}")
    phi = None
    for o in c.get("overlap", []):
        if o["mode"] == "poll":
            phi = interference_from_overlap(o["compute_alone"], o["compute_with_comm"], o["wait_after"],
                                            o["allreduce_alone"])
    return net, phi
