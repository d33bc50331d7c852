"""The text tables of ``bench scaling``: the measured rows, predicted against measured, and the
projections, each line handed to ``say`` (print, and keep for ``scaling.txt``)."""
from __future__ import annotations

from .model import own_compute, reported_points

__all__ = ["print_measured", "print_check", "print_projection", "print_node_projection"]


def print_measured(rows, say):
    """The measured rows (:func:`~.measure.measure`): step time, images/s, E(P) and the breakdown, with
    a note under the table for each "-" and a warning for E(P) above 1.05."""
    say(f"\n{'algorithm':<24}{'P':>3} {'step ms':>9} {'images/s':>9} {'E(P)':>6} {'fwd+bwd':>8} {'wait':>7} "
        f"{'own':>8} {'update':>7} {'other':>7} {'allreduce alone':>16} {'overlap eff':>12}")
    for r in rows:
        b = r["time_breakdown"]
        other = r["step_time_s"] - sum(b.values())
        ca = "-" if not r.get("comm_alone_s") else f"{1e3 * r['comm_alone_s']:.2f} ms"
        oe = "-" if r.get("overlap_efficiency") is None else f"{r['overlap_efficiency']:.2f}"
        eff = "-" if r["efficiency"] is None else f"{r['efficiency']:.3f}"
        say(f"{r['label']:<24}{r['P']:>3} {1e3 * r['step_time_s']:9.2f} {r['images_per_s']:9.0f} {eff:>6} "
            f"{1e3 * (b['forward'] + b['backward']):8.2f} {1e3 * b['wait']:7.2f} {1e3 * own_compute(r):8.2f} "
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


def print_check(check, say):
    """Predicted against measured step times (:func:`~.model.model_check`); nothing when empty."""
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


def print_projection(proj, say, show=(2, 8, 32, 64, 128, 256, 1024)):
    """Projected E(P) at the node counts ``show``, per network and algorithm
    (:func:`~.model.projection`), each against the baseline on one node."""
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


def print_node_projection(proj, say, show=(8, 64, 128)):
    """``--project``: E over nodes of R ranks, flat and hierarchical allreduce, at the node counts ``show``
    (:func:`~.model.node_projection`)."""
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
