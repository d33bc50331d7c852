"""Time to accuracy per network (issue 52): one set of virtual runs read on each
network's time axis.

A method's accuracy after k steps does not depend on the network, its time
does: each run is trained once, and its validation curve (the ``--eval-every``
curve, else one point per epoch) is put on the time axis of every network and
compute interference phi the grid lists (``networks``, ``phis``): the point
of step k at ``k x`` the algorithm's cost-model step time there
(:func:`minips.report.projected_step_time`, the one the run itself reported).

Per (lr setting, P, network, phi, algorithm entry) :func:`time_cells` gives

- **time to target**, the target being the baseline entry's final
  validation metric (mean over its seeds that finished) minus
  ``target_below_baseline`` points: per seed the projected seconds to its
  first evaluation at or above it; a seed that never reaches it (or failed)
  is *not reached* and counted (``2/3 reached``); the mean and 95 % t
  interval only when every seed reached it;
- **metric at the budget**, the budget being the baseline's projected
  seconds for its whole run (mean over its seeds): per seed the value at its
  last evaluation at or before the budget (none before it: counted, no
  value), with its mean and 95 % t interval.

:func:`time_report` writes them as markdown tables; the grid keys are in
:mod:`minips.bench.study`; docs/outputs.md ("Time to accuracy") says what the
one-schedule reading costs in fairness.
"""
from __future__ import annotations

import statistics

from ...report import projected_step_time
from ...stats import CONFIDENCE, points_per_unit, t_interval
from .aggregate import baseline_label
from .grid import Grid

__all__ = ["time_cells", "time_report", "seed_curves", "MIN_PROFILE_STEPS"]

#: a seed's measured compute enters its cell's step time only when measured over at least this many
#: steps (``profile_steps``: a run resumed near its end measured only its last process's few steps,
#: the first of them loading kernels); when no seed has as many, every seed's counts
MIN_PROFILE_STEPS = 20


def _summary(rec: dict) -> dict | None:
    """What :func:`projected_step_time` reads, from a run record (None: the run has no projection)."""
    return rec.get("projection") or None


def seed_curves(records: list[dict], lr_name: str, label: str, P: int, network: str,
                phi: float) -> list[dict]:
    """One dict per run of a cell: ``seed``, ``status``, ``steps``,
    ``step_time_s`` and ``points`` ([(projected seconds, validation metric)]
    on ``network`` at ``phi``; empty for a failed run or one without a
    projection, then ``status`` says why: ``no projection``). The step time is
    the cost model's from each seed's measured compute, **mean over the
    cell's seeds**: the compute is the method's, its spread over seeds is
    measurement noise, and one step time per cell puts every seed's last
    evaluation at the same time (the baseline's budget is then its own end).
    A seed whose compute was measured over fewer than :data:`MIN_PROFILE_STEPS`
    steps (``profile_steps``, a run resumed near its end) is left out of that
    mean (``short_profile`` True) unless no seed has as many."""
    out = []
    for r in records:
        if (r["lr"], r["label"], r["P"]) != (lr_name, label, P):
            continue
        entry = {"seed": r["seed"], "status": r.get("status"), "steps": r.get("steps"), "points": []}
        proj = _summary(r)
        if r.get("status") == "ok" and proj is None:
            entry["status"] = "no projection"
        elif r.get("status") == "ok":
            entry["own_step_time_s"] = projected_step_time(proj, network, phi)
            entry["short_profile"] = (r.get("profile_steps") or MIN_PROFILE_STEPS) < MIN_PROFILE_STEPS
        out.append(entry)
    timed = [e for e in out if "own_step_time_s" in e]
    times = [e["own_step_time_s"] for e in timed if not e["short_profile"]] or [e["own_step_time_s"] for e in timed]
    t = statistics.fmean(times) if times else None
    recs = {r["seed"]: r for r in records if (r["lr"], r["label"], r["P"]) == (lr_name, label, P)}
    for e in out:
        if "own_step_time_s" in e:
            e["step_time_s"] = t
            e["points"] = [(p["step"] * t, p["value"]) for p in recs[e["seed"]].get("val_curve") or []]
            e["end_s"] = None if e["steps"] is None else e["steps"] * t
    return out


def _interval(values: list[float]) -> dict:
    """``mean``, ``ci`` (half-width of the 95 % t interval; None for one value), ``min``, ``max``."""
    if not values:
        return {"mean": None, "ci": None, "min": None, "max": None}
    iv = t_interval(values)
    return {"mean": iv.mean, "ci": iv.half_width if iv.has_ci else None, "min": min(values), "max": max(values)}


def time_cells(grid: Grid, records: list[dict]) -> list[dict]:
    """One dict per (lr setting, P, network, phi, algorithm entry) with runs:
    ``target`` (the validation metric to reach), ``budget_s`` (projected
    seconds), ``n`` (runs), ``reached`` (seeds that reached the target),
    ``time_to_target`` ({mean, ci, min, max} in projected seconds, over the
    seeds that reached it; ``ci`` None unless every seed reached it),
    ``at_budget`` ({mean, ci, min, max} of the metric at the budget) and
    ``at_budget_n`` (seeds with an evaluation by then), ``step_time_s``
    (projected seconds per step, mean over seeds: :func:`seed_curves`).
    Empty without ``networks`` or a baseline entry with a finished run.

    Raises:
        ValueError: a network the cost model does not know (load_grid checks them first).
    """
    base = baseline_label(grid, records)
    if not grid.networks or base is None:
        return []
    below = grid.target_below_baseline / points_per_unit(grid.metric)
    cells = []
    for lr_name in grid.lr:
        for P in sorted({r["P"] for r in records if r["lr"] == lr_name}):
            finals = [r["metric"] for r in records if (r["lr"], r["label"], r["P"]) == (lr_name, base, P)
                      and r.get("status") == "ok" and r.get("metric") is not None]
            if not finals:
                continue
            target = statistics.fmean(finals) - below
            for network in grid.networks:
                for phi in grid.phis:
                    base_runs = seed_curves(records, lr_name, base, P, network, phi)
                    ends = [c["end_s"] for c in base_runs if c.get("end_s") is not None]
                    budget = statistics.fmean(ends) if ends else None
                    for label in grid.algos:
                        runs = base_runs if label == base else seed_curves(records, lr_name, label, P, network, phi)
                        if runs:
                            cells.append(_cell(lr_name, P, network, phi, label, runs, target, budget))
    return cells


def _cell(lr_name, P, network, phi, label, runs, target, budget) -> dict:
    times, at, by_seed = [], [], {}
    for c in runs:
        t = next((s for s, v in c["points"] if v >= target), None)
        if t is not None:
            times.append(t)
            by_seed[str(c["seed"])] = t
        if budget is not None:  # (a relative 1e-9: the mean of equal ends may round below them)
            before = [v for s, v in c["points"] if s <= budget * (1 + 1e-9)]
            if before:
                at.append(before[-1])
    ttt = _interval(times)
    if len(times) < len(runs):
        ttt["ci"] = None  # an interval only when every seed reached the target
    steps = [c["step_time_s"] for c in runs if c.get("step_time_s") is not None]
    return {"lr": lr_name, "P": P, "network": network, "phi": phi, "label": label, "target": target,
            "budget_s": budget, "n": len(runs), "reached": len(times), "time_to_target": ttt,
            "time_to_target_values": times, "time_to_target_by_seed": by_seed,
            "at_budget": _interval(at), "at_budget_n": len(at),
            "at_budget_values": at, "no_projection": sum(c["status"] == "no projection" for c in runs),
            "failed": sum(c["status"] not in ("ok", "no projection") for c in runs),
            "step_time_s": statistics.fmean(steps) if steps else None}


def _seconds(c: dict) -> str:
    """``12.3 ± 0.4 s (3/3 reached)``, ``14.1 s (2/3 reached; no interval)``, ``not reached (0/3)``."""
    t, k, n = c["time_to_target"], c["reached"], c["n"]
    if not k:
        return f"not reached (0/{n})"
    if k < n:
        return f"{t['mean']:.3g} s ({k}/{n} reached; no interval)"
    return (f"{t['mean']:.3g} ± {t['ci']:.2g} s" if t["ci"] is not None else f"{t['mean']:.3g} s") \
        + f" ({k}/{n} reached)"


def _at_budget(c: dict, digits: int) -> str:
    a, k, n = c["at_budget"], c["at_budget_n"], c["n"]
    if not k:
        return f"no evaluation by then (0/{n})"
    s = f"{a['mean']:.{digits}f}" + (f" ± {a['ci']:.{digits}f}" if a["ci"] is not None else "")
    return s + (f" ({k}/{n} seeds)" if k < n else f" ({n} seeds)" if n > 1 else " (1 seed)")


def time_report(grid: Grid, cells: list[dict]) -> str:
    """Markdown: per (lr setting, P, network) one table, a row per algorithm
    entry, per phi its time to the target and its validation metric at the
    budget (projected seconds; 95 % t intervals over seeds)."""
    if not cells:
        return ""
    m = grid.metric
    digits = 2 if "bleu" in m else 4
    lines = [f"# time to accuracy per network (projected seconds, {int(CONFIDENCE * 100)} % t intervals over seeds)",
             "", f"Each run trained once; its {m} curve is read on every network's time axis: the evaluation of "
             "step k at k x the algorithm's cost-model step time at that P on that network with compute "
             "interference phi (0: communication overlapped for free; 1: the overlapped part costs compute "
             f"time). **Target**: the baseline's final {m} (mean over its seeds) minus "
             f"{grid.target_below_baseline:g} points; per seed the seconds to its first evaluation at or above "
             "it; a seed that never reaches it is *not reached* and counted (k/n reached); mean ± interval "
             f"only when every seed reached it. **At the budget**: {m} at each seed's last evaluation at or "
             "before the budget, the baseline's projected seconds for its whole run (mean over its seeds). "
             "One schedule for every network: what that costs in fairness is in docs/outputs.md, "
             "\"Time to accuracy\".", ""]
    for lr_name in grid.lr:
        for P in sorted({c["P"] for c in cells if c["lr"] == lr_name}):
            for network in grid.networks:
                cs = [c for c in cells if (c["lr"], c["P"], c["network"]) == (lr_name, P, network)]
                if not cs:
                    continue
                phis = [p for p in grid.phis if any(c["phi"] == p for c in cs)]
                head = ["algorithm"] + [x for p in phis for x in (f"phi={p:g}: s to target",
                                                                   f"phi={p:g}: {m} at budget")]
                info = "; ".join(f"phi={p:g}: target {c['target']:.{digits}f}, budget "
                                 + ("n/a" if c["budget_s"] is None else f"{c['budget_s']:.3g} s")
                                 for p in phis for c in [next(c for c in cs if c["phi"] == p)])
                lines += [f"## lr setting `{lr_name}`, P={P}, network {network}", "", info, "",
                          "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
                for label in grid.algos:
                    row = [label]
                    for p in phis:
                        c = next((c for c in cs if c["label"] == label and c["phi"] == p), None)
                        if c is None:
                            row += ["-", "-"]
                            continue
                        note = ""
                        if c["failed"] or c["no_projection"]:
                            note = f" [{c['failed']} failed, {c['no_projection']} without a projection]"
                        row += [_seconds(c) + note, _at_budget(c, digits)]
                    lines.append("| " + " | ".join(row) + " |")
                lines.append("")
    return "\n".join(lines) + "\n"
