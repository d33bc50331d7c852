"""``python -m minips bench scaling``: weak scaling of the training step, measured
at small P and projected to many nodes.

Run it as one plain process (not under mpiexec): for each rank count P and
algorithm it launches::

    mpiexec -n P [-bind-to core] python -m minips train --algo A --max-steps N --epochs 1 \\
        --batch-size B --quiet --no-trace --out DIR/P{P}-{A}-r{i}

(weak scaling: the per-rank batch B is fixed, the global batch is P B), reads
each run's ``summary.json`` and reports, per algorithm and P: the steady-state
step time of the slowest rank (median over ``--repeats`` runs), images/s, the
timing breakdown, and the weak-scaling efficiency ``E(P) = T(1) / T(P)``.

Threads: each rank gets ``--threads`` Numba/BLAS threads (default 1), so P
ranks use P cores and T(1) is one rank on one core; E(P) then measures what
communication (and sharing the node's memory bandwidth) costs, not thread
scaling. Up to the number of cores the ranks are bound to cores; beyond it
they are oversubscribed (fine for correctness, meaningless for timing).

Then the model (:mod:`minips.labs.projection`):

- *predicted vs measured*: the step time at each measured P predicted from the
  P = 1 compute profile plus (a) the blocking allreduce time the Trainer
  measured at that P (``comm_alone_s``), and (b) an alpha-beta fit from
  ``bench comm --json`` (``--comm-json``), with the interference phi of
  assumption 4 (``--interference``; ``auto`` = from the comm JSON's ``poll``
  overlap measurement, else 1: a node with no spare core);
- *projection*: E(P) for P = 1..``--project-max`` nodes on each interconnect of
  ``--project-networks``, with the P = 1 profile measured here as the per-node
  compute and ideal offloaded overlap (phi = ``--project-interference``,
  default 0), next to the seed paper's 93.4 % (64 nodes) and 90.5 % (128).

Prints the tables and writes them to ``OUT/scaling.txt`` (beside ``--json``,
with its name and ``.txt``, when one is given), everything to
``--json`` (default ``OUT/scaling.json``), and ``--plot`` (measured breakdown
and E(P); projection). A "-" in a table is explained under it. ``--from-json`` redoes the model and plots
from an earlier JSON without running anything.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from ..distributed.algorithms import BASELINE, DEFAULT_ALGOS
from ..kernels import cpuinfo
from ..kernels.threads import cores_on_node
from .launch import MpiexecNotFound, launch_env, require_mpiexec

__all__ = ["parse_ranks", "parse_algos", "measure", "model_check", "projection", "run", "reported_points"]

def reported_points() -> dict:
    """Weak-scaling efficiencies the registered algorithms' papers report:
    ``{"name (where)": {P: E(P)}}`` (from each class's ``reported_efficiency``)."""
    from ..distributed.algorithms import ALGORITHMS
    return {f"{name}, {cls.reported_efficiency[0]}": dict(cls.reported_efficiency[1])
            for name, cls in ALGORITHMS.items() if getattr(cls, "reported_efficiency", None)}


class ScalingError(ValueError):
    """Bad option or a failed run; the message names the fix."""


def parse_ranks(spec: str) -> list[int]:
    """``"1,2,4"`` -> ``[1, 2, 4]``.

    Raises:
        ScalingError: empty, not integers, or a value < 1.
    """
    try:
        ranks = [int(x) for x in str(spec).split(",") if x.strip()]
    except ValueError:
        raise ScalingError(f"--ranks {spec!r}: give comma-separated integers, e.g. 1,2,4") from None
    if not ranks:
        raise ScalingError("--ranks is empty; e.g. --ranks 1,2")
    bad = [r for r in ranks if r < 1]
    if bad:
        raise ScalingError(f"--ranks {spec!r}: rank counts must be >= 1 (got {bad[0]})")
    return sorted(set(ranks))


def parse_algos(spec: str) -> list[dict]:
    """``"sync,overlap-sync,pseudo-sync:predictor=adaptive"`` -> one entry per
    comma-separated algorithm spec: ``{"algo": the spec, "label": its label}``
    (the grammar of ``compare``).

    Raises:
        ScalingError: empty, or an entry that is not a valid spec or whose
            algorithm has no step-time model.
    """
    from ..distributed.algorithms import resolve
    from ..labs.projection import StepProfile

    out = []
    for item in [s.strip() for s in str(spec).split(",") if s.strip()]:
        try:
            a = resolve(item)
            a.step_time(StepProfile(forward=1e-3, backward=1e-3, grad_bytes=4.0), 1, _NoNetwork())
        except ValueError as e:
            raise ScalingError(f"--algos entry {item!r}: {e}") from None
        except NotImplementedError as e:
            raise ScalingError(f"--algos entry {item!r}: {e}; the projection needs one") from None
        out.append({"algo": item, "label": a.label})
    if not out:
        raise ScalingError("--algos is empty; e.g. --algos " + ",".join(DEFAULT_ALGOS))
    return out


class _NoNetwork:
    """A free network (every primitive takes 0 s): to check that a cost model runs."""

    def __getattr__(self, name):
        return lambda *a, **k: 0.0


def _train_cmd(args, entry: dict, P: int, out: Path, mpiexec: str) -> list[str]:
    cmd = [mpiexec, "-n", str(P)]
    if args.bind and P * args.threads <= cores_on_node() and args.threads == 1:
        cmd += ["-bind-to", "core"]
    cmd += [sys.executable, "-m", "minips", "train", "--model", args.model, "--data", args.data,
            "--algo", entry["algo"], "--epochs", "1", "--max-steps", str(args.steps),
            "--batch-size", str(args.batch_size), "--lr", str(args.lr), "--progress", args.progress,
            *_flag_args(_option_flags(vars(args))), "--seed", "0", "--quiet", "--no-trace", "--out", str(out),
            "--overwrite"]
    if args.network:
        cmd += ["--network", args.network]
    return cmd


def _option_flags(values: dict) -> dict:
    """The older per-option flags (the algorithms package's ``OPTION_FLAGS``,
    e.g. a bucket size) given in ``values`` (the arguments, or a JSON's
    ``config``): name -> value, those not given left out."""
    from ..distributed.algorithms.option_flags import OPTION_FLAGS
    return {k: values[k] for k, f in OPTION_FLAGS.items() if f.type != "dict" and values.get(k) is not None}


def _flag_args(flags: dict) -> list[str]:
    return [a for k, v in flags.items() for a in (f"--{k.replace('_', '-')}", str(v))]


def _load_avg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def measure(args, entries: list[dict], ranks: list[int], out_dir: Path, say=print) -> list[dict]:
    """Run every (P, algorithm) ``args.repeats`` times; one row per (P, algorithm)
    with the median step time and that run's breakdown.

    Raises:
        ScalingError: a run failed or timed out (its stderr tail is quoted).
    """
    try:
        mpiexec = require_mpiexec()
    except MpiexecNotFound as e:
        raise ScalingError(str(e)) from None
    rows = []
    for P in ranks:
        for e in entries:
            runs = []
            for i in range(args.repeats):
                out = out_dir / f"P{P}-{e['label'].replace(':', '-')}-r{i}"
                cmd = _train_cmd(args, e, P, out, mpiexec)
                load = _load_avg()
                try:
                    r = subprocess.run(cmd, capture_output=True, text=True, env=launch_env(args.threads),
                                       timeout=args.timeout)
                except subprocess.TimeoutExpired:
                    raise ScalingError(f"P={P} {e['label']}: no result after {args.timeout} s "
                                       f"(raise --timeout or lower --steps): {' '.join(cmd)}") from None
                if r.returncode != 0 or not (out / "summary.json").exists():
                    tail = "\n".join(r.stderr.strip().splitlines()[-5:])
                    raise ScalingError(f"P={P} {e['label']} failed (exit {r.returncode}): {' '.join(cmd)}\n{tail}")
                s = json.loads((out / "summary.json").read_text())
                s["load_before"] = load
                runs.append(s)
            times = [s["step_time_s"] for s in runs]
            med = sorted(runs, key=lambda s: s["step_time_s"])[len(runs) // 2]
            row = {"P": P, "label": e["label"], "algo": e["algo"], "step_time_s": med["step_time_s"],
                   "step_times_s": times,
                   "images_per_s": args.batch_size * P / med["step_time_s"],
                   "time_breakdown": med["time_breakdown"], "comm_alone_s": med.get("comm_alone_s"),
                   "overlap_efficiency": med.get("overlap_efficiency"),
                   "threads_per_rank": med.get("threads_per_rank"), "network": med.get("network"),
                   "network_emulated": med.get("network_emulated"),
                   "load_before": [s["load_before"] for s in runs]}
            rows.append(row)
            say(f"  P={P} {e['label']}: step {1e3 * row['step_time_s']:.2f} ms "
                f"(runs: {', '.join(f'{1e3 * t:.1f}' for t in times)}; load {row['load_before'][0]})")
    for r in rows:
        base = next((b for b in rows if b["label"] == r["label"] and b["P"] == 1), None)
        r["efficiency"] = base["step_time_s"] / r["step_time_s"] if base else None
    return rows


def _grad_layout(model: str, data: str) -> tuple[int, list[tuple]]:
    """(gradient bytes, parameter shapes in the model's order) of ``model``."""
    from ..models import build_model
    from ..tasks import make_task

    params = build_model(model, make_task(data)).parameters()
    return 4 * sum(p.size for p in params), [tuple(p.shape) for p in params]


def _profile(row: dict, grad_bytes: int, spec: str | None = None, shapes=(), flags=None, phases=None):
    """The StepProfile of a measured ``row`` (its summary), with the extras
    the algorithm of ``spec`` reads (``Algorithm.profile_extras``, from the
    model's ``shapes`` and ``phases``, default the row's own breakdown); none
    without a spec."""
    from ..labs.projection import StepProfile
    return StepProfile.from_summary(row, grad_bytes, extras=_extras(spec, shapes, flags, row["time_breakdown"]
                                                                    if phases is None else phases))


def _extras(spec: str | None, shapes, flags, phases: dict) -> dict:
    """What the algorithm of ``spec`` (with the older per-option ``flags`` as
    defaults) reads from a StepProfile, from the model's ``shapes`` and the
    measured seconds per phase ``phases``."""
    from ..distributed.algorithms import resolve
    if spec is None:
        return {}
    try:
        a = resolve(spec, flags)
    except ValueError:  # an old JSON's free-form label
        return {}
    return a.cls.profile_extras(a.options, shapes, phases)


def _own_compute(row: dict) -> float:
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
    from ..distributed.costmodel import NetworkModel
    from ..labs.projection import step_time

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
            res["compute_s"], res["compute_P1_s"] = own.compute + _own_compute(r), prof.compute + _own_compute(base)
        if fit_net is not None:
            res["predicted_fit_s"] = f(prof, r["P"], fit_net, interference)
            res["fit_comm_s"] = fit_net.allreduce_time(grad_bytes, r["P"])
        out.append(res)
    return out


def _spec_of(row: dict) -> str:
    """The algorithm spec a measured row ran: its ``algo`` (a spec since the
    plug-in redesign). Older JSON files hold the bare name there and the spec
    in ``label`` (e.g. ``pseudo-sync`` and ``pseudo-sync:adaptive``)."""
    from ..distributed.algorithms import resolve
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
    from ..distributed.algorithms import resolve
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
    from ..distributed.costmodel import parse_network
    from ..labs.projection import project

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
    from ..distributed.costmodel import SHARED_MEMORY, parse_network
    from ..labs.projection import ALLREDUCE_PATHS, project_nodes

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


def _print_node_projection(proj, say, show=(8, 64, 128)):
    points = reported_points()
    paper = "; ".join(f"{name}: " + ", ".join(f"E({k}) = {100 * v:.1f}%" for k, v in pts.items())
                      for name, pts in points.items())
    for p in proj.values():
        say(f"\nprojected E over nodes of R ranks (P = nodes x R, a rank per core) on {p['network']}, node memory "
            f"{p['shared_memory']}; ideal overlap unless phi > 0; paper ({paper}; nodes)")
        w = max([12, *(len(r["algo"]) + 2 for r in p["rows"])])
        say(f"{'algorithm':<{w}}{'R':>4} {'allreduce':<13}" + "".join(f"{'N=' + str(n):>9}" for n in show)
            + f"{'allreduce ms N=' + str(show[-1]):>20}")
        for r in p["rows"]:
            cells = "".join(f"{100 * r['efficiency'][r['nodes'].index(n)]:8.1f}%" if n in r["nodes"] else f"{'-':>9}"
                            for n in show)
            last = r["comm_s"][r["nodes"].index(show[-1])] if show[-1] in r["nodes"] else None
            say(f"{r['algo']:<{w}}{r['ranks_per_node']:>4} {r['allreduce']:<13}" + cells
                + (f"{1e3 * last:20.3f}" if last is not None else f"{'-':>20}"))


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
        from ..distributed.algorithms import ALGORITHMS, resolve
        measured = {resolve(_spec_of(r)).name for r in rows}
        return [name for name in ALGORITHMS if name not in measured]
    return [e["algo"] for e in parse_algos(spec)]


def _family(spec: str) -> str:
    from ..distributed.algorithms import ALGORITHMS, resolve
    try:
        return ALGORITHMS[resolve(spec).name].family
    except ValueError:  # an old JSON's free-form label
        return "other"


def _print_measured(rows, say):
    say(f"\n{'algorithm':<24}{'P':>3} {'step ms':>9} {'images/s':>9} {'E(P)':>6} {'fwd+bwd':>8} {'wait':>7} "
        f"{'own':>8} {'update':>7} {'other':>7} {'allreduce alone':>16} {'overlap eff':>12}")
    for r in rows:
        b = r["time_breakdown"]
        other = r["step_time_s"] - sum(b.values())
        ca = "-" if not r.get("comm_alone_s") else f"{1e3 * r['comm_alone_s']:.2f} ms"
        oe = "-" if r.get("overlap_efficiency") is None else f"{r['overlap_efficiency']:.2f}"
        eff = "-" if r["efficiency"] is None else f"{r['efficiency']:.3f}"
        say(f"{r['label']:<24}{r['P']:>3} {1e3 * r['step_time_s']:9.2f} {r['images_per_s']:9.0f} {eff:>6} "
            f"{1e3 * (b['forward'] + b['backward']):8.2f} {1e3 * b['wait']:7.2f} {1e3 * _own_compute(r):8.2f} "
            f"{1e3 * b['update']:7.2f} {1e3 * other:7.2f} {ca:>16} {oe:>12}")
    notes = []
    if any(r["efficiency"] is None for r in rows):
        notes.append("E(P) -: no P = 1 run of this algorithm to divide by (add 1 to --ranks)")
    if any(not r.get("comm_alone_s") for r in rows):
        notes.append("allreduce alone -: one rank, nothing to communicate")
    if any(r.get("overlap_efficiency") is None for r in rows):
        notes.append("overlap eff -: one rank, or an algorithm that does not allreduce the gradient every step")
    say("  (times in ms per step; own = the algorithm's own compute (its phases other than forward, backward, "
        "update, post and wait); other = the step minus its phases: data, logging"
        + "".join(f"; {n}" for n in notes) + ")")
    superlinear = [f"{r['label']} at P = {r['P']}" for r in rows if r["efficiency"] and r["efficiency"] > 1.05]
    if superlinear:
        # Weak scaling cannot beat one rank by more than noise: the P = 1 run was slowed down.
        say(f"warning: E(P) > 1.05 for {', '.join(superlinear)}: faster than one rank, which weak scaling "
            "cannot be; the timings are noise (a busy machine?). Rerun on idle cores with --repeats 3.")


def _print_check(check, say):
    if not check:
        return
    say("\npredicted vs measured step time (model: P = 1 compute + allreduce; phi = "
        f"{check[0]['interference']:.2f}):")
    say(f"{'algorithm':<24}{'P':>3} {'measured ms':>12} {'pred. (measured allreduce) ms':>30} {'pred. (fit) ms':>15} "
        f"{'pred. (compute at P) ms':>24}")
    def cell(pred, measured):
        return "-" if pred is None else f"{1e3 * pred:.2f} ({100 * (pred / measured - 1):+.0f}%)"

    for c in check:
        a = cell(c.get("predicted_measured_comm_s"), c["measured_s"])
        b = cell(c.get("predicted_fit_s"), c["measured_s"])
        o = cell(c.get("predicted_own_compute_s"), c["measured_s"])
        say(f"{c['label']:<24}{c['P']:>3} {1e3 * c['measured_s']:12.2f} {a:>30} {b:>15} {o:>24}")
    if any(c.get(k) is None for c in check for k in ("predicted_measured_comm_s", "predicted_fit_s",
                                                        "predicted_own_compute_s")):
        say("  (-: no prediction of that kind: pred. (fit) needs --comm-json (a bench comm --json output); "
            "the others need the algorithm's P = 1 run and, at P, its measured allreduce)")


def _print_projection(proj, say, show=(2, 8, 32, 64, 128, 256, 1024)):
    for p in proj.values():
        base = p.get("baseline")
        w = max([22, *(len(a) + (len(f" vs {base}(1)") if base else 0) + 2 for a in p["algos"])])
        say(f"\nprojected E(P) on {p['network']} (ideal overlap unless phi > 0"
            + "".join(f"; {name} paper: " + ", ".join(f"E({k}) = {100 * v:.1f}%" for k, v in pts.items())
                      for name, pts in reported_points().items()) + ")")
        say(f"{'algorithm':<{w}}" + "".join(f"{'P=' + str(P):>9}" for P in show))
        for algo, rows in p["algos"].items():
            cells = [f"{100 * rows['efficiency'][rows['P'].index(P)]:8.1f}%" if P in rows["P"] else f"{'-':>9}"
                     for P in show]
            say(f"{algo:<{w}}" + "".join(cells))
        if base:
            for algo, rows in p["algos"].items():
                if algo == base:
                    continue
                say(f"{algo + f' vs {base}(1)':<{w}}" + "".join(
                    f"{100 * rows['vs_baseline_1'][rows['P'].index(P)]:8.1f}%" if P in rows["P"] else f"{'-':>9}"
                    for P in show) + f"   (throughput per node vs {base} on 1 node)")
            faster = [f"{algo} from P = {rows['overtakes_at']}" for algo, rows in p["algos"].items()
                      if algo != base and rows.get("overtakes_at") is not None]
            if faster:
                say(f"step shorter than {base}'s for every larger P projected: " + "; ".join(faster))
        allr = next(iter(p["algos"].values()))
        say(f"{'allreduce ms':<{w}}" + "".join(
            f"{1e3 * allr['comm_s'][allr['P'].index(P)]:9.3f}" if P in allr["P"] else f"{'-':>9}" for P in show))
        if any(P not in rows["P"] for rows in p["algos"].values() for P in show):
            say("  (-: not projected, beyond --project-max)")


def plot_scaling(result: dict, path) -> None:
    """Left: measured step-time breakdown per (algorithm, P). Middle: measured
    and predicted E(P). Right: projected E(P) to many nodes with the paper's points."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..plots import PHASE_COLORS
    from ..timing import PHASES

    rows = result["measured"]
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    ax = axes[0]
    names = [f"{r['label']}\nP={r['P']}" for r in rows]
    bottom = [0.0] * len(rows)
    for ph in PHASES:
        vals = [1e3 * r["time_breakdown"][ph] for r in rows]
        ax.bar(names, vals, bottom=bottom, label=ph, color=PHASE_COLORS.get(ph))
        bottom = [b + v for b, v in zip(bottom, vals)]
    other = [1e3 * r["step_time_s"] - b for r, b in zip(rows, bottom)]
    ax.bar(names, other, bottom=bottom, label="other", color="#BBBBBB")
    ax.set_ylabel("ms per step (slowest rank)")
    ax.tick_params(axis="x", labelsize=7, labelrotation=60)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), reverse=True)  # beside, not over, the bars
    emu = " (EMULATED " + rows[0]["network"] + ")" if rows and rows[0].get("network_emulated") else ""
    ax.set_title(f"measured step, {result['config']['model']}, batch {result['config']['batch_size']}/rank{emu}",
                 fontsize=9)
    ax = axes[1]
    from ..plots import algo_color, run_styles
    labels = list(dict.fromkeys(r["label"] for r in rows))
    for label, st in zip(labels, run_styles(len(labels))):
        color = algo_color(_algo_name(label))  # the algorithm's colour in every minips figure
        rs = [r for r in rows if r["label"] == label and r["efficiency"] is not None]
        ax.plot([r["P"] for r in rs], [r["efficiency"] for r in rs], marker=st["marker"], linestyle="-", color=color,
                label=f"{label} measured")
        cs = [c for c in result.get("model_check", []) if c["label"] == label and c.get("predicted_measured_comm_s")]
        if cs:
            t1 = next(r["step_time_s"] for r in rows if r["label"] == label and r["P"] == 1)
            ax.plot([1] + [c["P"] for c in cs], [1.0] + [t1 / c["predicted_measured_comm_s"] for c in cs], "x--",
                    color=color, label=f"{label} model")
    ax.set_xlabel("ranks P")
    ax.set_ylabel("E(P) = T(1) / T(P)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title(f"weak scaling on this machine ({result['host']['cores']} cores, load "
                 f"{result['host']['load_start']})", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _algo_name(label: str) -> str:
    """The registered algorithm of a spec or label ("pseudo-sync:adaptive@x" -> "pseudo-sync")."""
    return label.split("@")[0].split(":")[0].strip()


def plot_projection(result: dict, path) -> None:
    """E(P) against nodes (log scale) per interconnect and algorithm, with the
    seed paper's 93.4 % at 64 nodes and 90.5 % at 128."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..plots import algo_color
    proj = result["projection"]
    algos = list(next(iter(proj.values()))["algos"]) if proj else []
    if len(algos) > 6:  # one row of panels per family, or the lines cannot be told apart
        return _plot_projection_by_family(result, path, plt)
    fig, axes = plt.subplots(1, len(proj), figsize=(4.2 * len(proj), 4), sharey=True, squeeze=False)
    styles = {k: ("-", "--", "-.", (0, (5, 1, 1, 1)))[i % 4] for i, k in enumerate(algos)}
    for ax, p in zip(axes[0], proj.values()):
        base = p.get("baseline")
        for algo, rows in p["algos"].items():
            line, = ax.semilogx(rows["P"], [100 * e for e in rows["efficiency"]], linestyle=styles.get(algo, "-"),
                                base=2, label=f"{algo}: E(P)", lw=2, color=algo_color(_algo_name(algo)))
            if algo != base and "vs_baseline_1" in rows:
                ax.semilogx(rows["P"], [100 * e for e in rows["vs_baseline_1"]], ":", base=2,
                            color=line.get_color(), lw=1, label=f"{algo}: T_{base}(1)/T(P)")
        for algo_name, pts in reported_points().items():
            ax.plot(list(pts), [100 * v for v in pts.values()], "k*", ms=11, label=f"paper ({algo_name})")
        ax.set_title(p["network"], fontsize=9)
        ax.set_xlabel("nodes P (one rank each)")
        ax.grid(alpha=0.3, which="both")
        ax.set_ylim(0, 105)
    axes[0][0].set_ylabel("projected weak-scaling efficiency E(P) %")
    axes[0][0].legend(fontsize=7, loc="lower left")
    cfg = result["config"]
    fig.suptitle(f"projection: {cfg['model']}, {result['grad_bytes'] / 1e6:.2f} MB gradient, per-node step measured "
                 f"at P=1 here; ring allreduce, phi = {result['project_interference']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _plot_projection_by_family(result: dict, path, plt) -> None:
    """E(P) against nodes: one row of panels per algorithm family, one column
    per interconnect; the baseline (grey) is drawn in every panel. An
    algorithm whose one-node step is more than 1 % longer than the baseline's
    (its own compute: a predictor, a compressor) also gets a thin dotted line
    of its throughput per node relative to the baseline on one node,
    ``T_base(1) / T(P)``, which E(P) hides."""
    from matplotlib.lines import Line2D

    proj = result["projection"]
    first = next(iter(proj.values()))
    base = first.get("baseline")
    families = {}
    for algo in first["algos"]:
        if algo != base:
            families.setdefault(_family(algo), []).append(algo)
    fig, axes = plt.subplots(len(families), len(proj), figsize=(4.4 * len(proj) + 1.6, 3.1 * len(families)),
                             sharey=True, sharex=True, squeeze=False)
    styles = ("-", "--", "-.", ":")
    colors = [c for i, c in enumerate(plt.get_cmap("tab10").colors) if i != 7]  # grey is the baseline's
    for r, (fam, members) in enumerate(families.items()):
        dotted = False
        for c, p in enumerate(proj.values()):
            ax = axes[r][c]
            if base in p["algos"]:
                rows = p["algos"][base]
                ax.semilogx(rows["P"], [100 * e for e in rows["efficiency"]], color="0.55", lw=3, base=2,
                            label=f"{base} (baseline)")
            for i, algo in enumerate(members):
                rows = p["algos"][algo]
                color = colors[i % len(colors)]
                ax.semilogx(rows["P"], [100 * e for e in rows["efficiency"]], base=2, lw=1.6,
                            color=color, linestyle=styles[(i // len(colors)) % len(styles)],
                            marker="os^vD<>ph*"[i % 10], ms=3, label=algo)
                vs = rows.get("vs_baseline_1")
                if vs and vs[0] < 1 / 1.01:  # T(1) more than 1 % above the baseline's
                    ax.semilogx(rows["P"], [100 * v for v in vs], base=2, lw=0.9, color=color, linestyle=":")
                    dotted = True
            ax.set_ylim(0, 105)
            ax.grid(alpha=0.3, which="both")
            if r == 0:
                ax.set_title(p["network"], fontsize=8)
            if c == 0:
                ax.set_ylabel(f"{fam}\nE(P) %", fontsize=8)
            if r == len(families) - 1:
                ax.set_xlabel("nodes P (one rank each)")
        handles, labels = axes[r][-1].get_legend_handles_labels()
        if dotted:
            handles.append(Line2D([], [], color="k", lw=0.9, linestyle=":"))
            labels.append(f"dotted: T_{base}(1) / T(P)")
        axes[r][-1].legend(handles, labels, fontsize=6, loc="center left", bbox_to_anchor=(1.02, 0.5))
    cfg = result["config"]
    fig.suptitle(f"projected weak-scaling efficiency E(P) = T(1) / T(P) of every family: {cfg['model']}, "
                 f"{result['grad_bytes'] / 1e6:.2f} MB gradient, per-node step measured at P=1 here; "
                 f"phi = {result['project_interference']}; options as labelled (a bare name: its defaults)", fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.985))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _comm_fit(path):
    """(NetworkModel of the fit, phi from the poll-mode overlap or None) of a bench comm JSON."""
    from ..distributed.costmodel import NetworkModel
    from ..labs.projection import interference_from_overlap

    c = json.loads(Path(path).read_text())
    if not c.get("fit"):
        raise ScalingError(f"{path} has no fit: run bench comm under mpiexec -n 2 or more (without --overlap-only)")
    net = NetworkModel(c["fit"]["alpha_s"], c["fit"]["beta_s_per_byte"], f"fit of {path}")
    phi = None
    for o in c.get("overlap", []):
        if o["mode"] == "poll":
            phi = interference_from_overlap(o["compute_alone"], o["compute_with_comm"], o["wait_after"],
                                            o["allreduce_alone"])
    return net, phi


def run(args) -> int:
    from ..distributed.comm import launched_by_mpi

    if launched_by_mpi() and os.environ.get("MINIPS_MPI") != "1":
        raise ScalingError("bench scaling launches mpiexec itself: run it as one plain process, "
                           "not under mpiexec")
    lines: list[str] = []

    def say(*a):  # print, and keep for the report file
        text = " ".join(map(str, a))
        lines.append(text)
        print(text, flush=True)
    if args.from_json:
        result = json.loads(Path(args.from_json).read_text())
        rows = result["measured"]
    else:
        ranks = parse_ranks(args.ranks)
        entries = parse_algos(args.algos)
        if args.steps < 8:
            raise ScalingError("--steps must be >= 8 (the first 5 steps are JIT warm-up and are not timed)")
        if args.repeats < 1:
            raise ScalingError("--repeats must be >= 1")
        out_dir = Path(args.out)
        out_dir.mkdir(parents=True, exist_ok=True)
        cores = cores_on_node()
        over = [P for P in ranks if P * args.threads > cores]
        say(f"bench scaling: {args.model} on {args.data}, batch {args.batch_size}/rank, {args.steps} steps, "
            f"{args.threads} thread(s)/rank, {args.repeats} repeat(s); {cores} cores; load {_load_avg()}; "
            f"cpu: {cpuinfo.describe()}"
            + (f"; NOTE P={over} oversubscribe the cores: their times are not meaningful" if over else ""))
        load_start = _load_avg()
        t0 = time.time()
        rows = measure(args, entries, ranks, out_dir, say)
        result = {"config": {**{k: getattr(args, k) for k in ("model", "data", "batch_size", "steps", "lr",
                                                              "threads", "repeats", "progress", "network", "algos",
                                                              "ranks")},
                             **_option_flags(vars(args))},
                  "host": {"name": os.uname().nodename, "cores": cores, "cpu": cpuinfo.describe(),
                           "load_start": load_start,
                           "load_end": _load_avg(), "seconds": time.time() - t0, "python": sys.version.split()[0]},
                  "measured": rows}
    cfg = result["config"]
    flags = _option_flags(cfg)
    grad_bytes, shapes = _grad_layout(cfg["model"], cfg["data"])
    result["grad_bytes"], result["shapes"] = grad_bytes, shapes
    fit_net, phi_fit = (None, None)
    if args.comm_json:
        fit_net, phi_fit = _comm_fit(args.comm_json)
    if args.interference == "auto":
        phi = phi_fit if phi_fit is not None else 1.0
    else:
        phi = float(args.interference)
    result["model_check"] = model_check(rows, grad_bytes, shapes, fit_net, phi, flags)
    result["comm_json"] = args.comm_json
    Ps = [2**i for i in range(0, int(args.project_max).bit_length()) if 2**i <= args.project_max]
    nets = [n for n in args.project_networks.split(",") if n.strip()]
    result["project_interference"] = args.project_interference
    also = project_also(args.project_also, rows)
    result["project_also"] = also
    result["projection"] = projection(rows, grad_bytes, shapes, nets, Ps, args.project_interference,
                                      also, flags) if nets else {}
    result["paper_points"] = reported_points()
    if args.project:
        from ..distributed.costmodel import SharedMemoryModel
        shm = SharedMemoryModel(args.intra_latency * 1e-6, args.intra_bandwidth * 1e9)
        rpn = [int(x) for x in str(args.project_ranks_per_node).split(",") if x.strip()]
        nodes = [n for n in PROJECT_NODES if n <= args.project_nodes]
        result["node_projection"] = node_projection(rows, grad_bytes, shapes, nets, nodes, rpn,
                                                    args.project_interference, also, flags, shm)
    _print_measured(rows, say)
    _print_check(result["model_check"], say)
    _print_projection(result["projection"], say)
    if args.project:
        _print_node_projection(result["node_projection"], say, show=tuple(n for n in (8, 64, 128) if n in nodes))
    # with --json the tables go beside it (OUT may hold another run's scaling.txt)
    json_path = Path(args.json) if args.json else Path(args.out) / "scaling.json"
    txt_path = json_path.with_suffix(".txt") if args.json else Path(args.out) / "scaling.txt"
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(result, indent=2) + "\n")
    say(f"\nwrote {json_path} (everything) and {txt_path} (these tables)")
    txt_path.write_text("\n".join(lines) + "\n")
    if args.plot:
        plot_scaling(result, args.plot)
        say(f"wrote {args.plot}")
    if args.plot_projection and result["projection"]:
        plot_projection(result, args.plot_projection)
        say(f"wrote {args.plot_projection}")
    return 0


def add_arguments(p):
    p.add_argument("--algos", default=",".join(DEFAULT_ALGOS),
                   help="comma-separated algorithm specs NAME[:key=value]...[@LABEL] "
                        f"(default {','.join(DEFAULT_ALGOS)}; python -m minips algorithms lists them)")
    p.add_argument("--ranks", default="1,2", help="rank counts, e.g. 1,2,4 (default 1,2)")
    p.add_argument("--model", default="convnet", help="model (default convnet)")
    p.add_argument("--data", default="fashion-mnist-mini", help="data set (default fashion-mnist-mini)")
    p.add_argument("--batch-size", type=int, default=32, help="per-rank batch (default 32)")
    p.add_argument("--steps", type=int, default=60, help="steps per run; the first 5 are not timed (default 60)")
    p.add_argument("--lr", type=float, default=0.05, help="learning rate (timing does not depend on it)")
    p.add_argument("--threads", type=int, default=1, help="Numba/BLAS threads per rank (default 1)")
    p.add_argument("--repeats", type=int, default=3, help="runs per point; the median step time is reported")
    p.add_argument("--progress", default="poll", choices=["none", "poll", "thread"], help="progress mode")
    from ..distributed.algorithms.option_flags import OPTION_FLAGS
    for name, flag in OPTION_FLAGS.items():  # the older per-option flags, passed to every run as train takes them
        if flag.type != "dict":
            p.add_argument(f"--{name.replace('_', '-')}", dest=name, type=flag.python_type,
                           help=flag.help + "; given to every run")
    p.add_argument("--network", help="emulate an interconnect in the measured runs (as in train)")
    p.add_argument("--bind", action=argparse.BooleanOptionalAction, default=True,
                   help="mpiexec -bind-to core when the ranks fit on the cores (default on)")
    p.add_argument("--timeout", type=float, default=900, help="seconds per run before giving up")
    p.add_argument("--out", default="runs/scaling", help="directory of the runs' outputs and of the report: "
                                                         "scaling.txt (the tables) and scaling.json (unless --json: "
                                                         "then both beside it)")
    p.add_argument("--comm-json", help="bench comm --json output: its alpha-beta fit (and poll-mode overlap) "
                                       "for the predicted-vs-measured check")
    p.add_argument("--interference", default="auto",
                   help="phi in [0,1] for the check at the measured P (auto: from --comm-json, else 1)")
    p.add_argument("--project-networks", default="ib-edr,ib-fdr,10gbe,1gbe",
                   help="interconnects for the projection (presets or alpha=..,beta=..; empty = none)")
    p.add_argument("--project-max", type=int, default=1024, help="largest node count projected (default 1024)")
    p.add_argument("--project-interference", type=float, default=0.0,
                   help="phi of the projection (default 0: offloaded, ideal overlap)")
    p.add_argument("--project-also", help="further algorithm specs (comma-separated) to project from the "
                                          "baseline's P = 1 profile, without measuring them; 'all' = every "
                                          "registered algorithm not measured, at its default options")
    p.add_argument("--project", action="store_true",
                   help="also project over nodes of many ranks (--project-ranks-per-node, a rank per core) with the "
                        "flat and the hierarchical allreduce, up to --project-nodes nodes")
    p.add_argument("--project-nodes", type=int, default=128, help="largest node count of --project (default 128)")
    p.add_argument("--project-ranks-per-node", default=",".join(map(str, PROJECT_RANKS_PER_NODE)),
                   help="ranks per node of --project, comma-separated (default 24,48,96)")
    p.add_argument("--intra-bandwidth", type=float, default=100.0,
                   help="GB/s of a node's memory, shared by its ranks, for --project (default 100: an assumption)")
    p.add_argument("--intra-latency", type=float, default=1.0,
                   help="microseconds per node barrier for --project (default 1: an assumption)")
    p.add_argument("--from-json", help="redo the model and plots from an earlier --json, run nothing")
    p.add_argument("--json", help="write everything to this JSON file (default OUT/scaling.json)")
    p.add_argument("--plot", help="PNG of the measured breakdown and E(P)")
    p.add_argument("--plot-projection", help="PNG of the projected E(P)")
    p.set_defaults(func=run)

