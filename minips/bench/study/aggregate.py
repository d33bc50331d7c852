"""Aggregating a study's run records: per cell over seeds (:func:`aggregate`,
:func:`family_cells`) and each entry paired by seed with the baseline or another entry
(:func:`paired_comparisons`, :func:`contrasts`)."""
from __future__ import annotations

import statistics

from ...distributed.algorithms import BASELINE
from ...kernels import threads
from ...stats import Failure, collapsed, compare_with_baseline, failures, fmt_left_out, points_per_unit, \
    t_interval
from .grid import Grid, split_entry, tested_metric

__all__ = ["aggregate", "by_seed", "paired_comparisons", "contrasts", "baseline_label", "family_cells",
           "oversubscribed", "mark_collapsed"]


def mark_collapsed(records: list[dict], chance: float | None) -> list[dict]:
    """The records with every finished run whose ``metric`` ended at chance
    (:func:`minips.stats.collapsed`: below ``chance + 0.01``, 0.11 for ten
    classes) given ``status = "collapsed"``: from then on it is a failure like a
    divergence, counted and never averaged or paired. The grid's metric (the
    validation metric when there is one) decides, so the run's test value is
    left out with it. Records already marked stay so; without ``chance`` (a
    metric with no chance level, such as BLEU) nothing changes."""
    if chance is None:
        return records
    return [{**r, "status": "collapsed"} if r.get("status") == "ok" and collapsed(r.get("metric"), chance) else r
            for r in records]


def aggregate(records: list[dict], chance: float | None = None) -> dict:
    """Per (lr setting, label, P): ``n``, ``n_ok``, ``diverged``, ``collapsed``
    (runs that ended at chance, see :func:`mark_collapsed`; with ``chance``
    they are judged on this ``metric`` too), ``failed``, ``mean``, ``std``
    (sample standard deviation; 0 for one seed), ``ci`` (half-width of the 95 %
    t interval of the mean; None for one seed), ``min``, ``max`` of the metric
    over the runs that finished above chance (None when none did): a diverged
    or collapsed run is in no mean."""
    groups: dict = {}
    for r in mark_collapsed(records, chance):
        groups.setdefault((r["lr"], r["label"], r["P"]), []).append(r)
    out = {}
    for key, rs in groups.items():
        vals = [r["metric"] for r in rs if r.get("status") == "ok" and r.get("metric") is not None]
        out[key] = {"n": len(rs), "n_ok": len(vals), "diverged": sum(r.get("status") == "diverged" for r in rs),
                    "collapsed": sum(r.get("status") == "collapsed" for r in rs),
                    "failed": sum(r.get("status") in ("failed", "timeout") for r in rs),
                    "at_chance": sum(r.get("status") == "collapsed" for r in rs),
                    "mean": statistics.fmean(vals) if vals else None,
                    "std": statistics.stdev(vals) if len(vals) > 1 else (0.0 if vals else None),
                    "ci": t_interval(vals).half_width if len(vals) > 1 else None,
                    "min": min(vals) if vals else None, "max": max(vals) if vals else None,
                    "values": vals}
    return out


def by_seed(records: list[dict], lr_name: str, label: str, P: int, key: str) -> dict:
    """``{seed: value}`` of one cell's runs: the value of a finished run, a
    :class:`minips.stats.Failure` (``diverged``, ``collapsed``, ``failed``) for
    a run that has none, so that a comparison counts it and leaves it out."""
    out = {}
    for r in records:
        if (r["lr"], r["label"], r["P"]) != (lr_name, label, P):
            continue
        st = r.get("status")
        if st == "ok" and r.get(key) is not None:
            out[r["seed"]] = r[key]
        elif st != "ok":
            out[r["seed"]] = Failure("failed" if st == "timeout" else st)
    return out


def paired_comparisons(grid: Grid, records: list[dict]) -> list[dict]:
    """Every (lr setting, P, algorithm entry) against the baseline entry at the
    same lr and P, paired by seed (:func:`minips.stats.compare_with_baseline`),
    for the grid's metric and, when there is one, its ``report_metric``. Each
    dict: ``lr``, ``P``, ``label``, ``baseline``, ``metric`` and ``reported``
    (None, or the comparison of ``label - baseline`` in the metric's units;
    the grid metric's carries ``target`` and ``seeds_to_resolve`` when the
    grid has ``within_points``; diverged and collapsed runs are left out and
    counted in its ``left_out``), and ``no_value`` (``{key: "3 of 3
    collapsed"}`` where nothing was left to pair)."""
    base = baseline_label(grid, records)
    pairs = [(label, base) for label in grid.algos if label != base] if base else []
    return _pair_rows(grid, mark_collapsed(records, grid.chance), pairs, within=True)


def contrasts(grid: Grid, records: list[dict]) -> list[dict]:
    """The grid's ``contrasts`` (pairs "A - B" of algos entries), each paired
    by seed at every (lr setting, P) where both ran; rows as in
    :func:`paired_comparisons` (``baseline`` is B; no target)."""
    return _pair_rows(grid, mark_collapsed(records, grid.chance), grid.contrasts, within=False)


def _pair_rows(grid: Grid, records: list[dict], pairs, within: bool) -> list[dict]:
    out = []
    keys = ["metric"] + (["reported"] if grid.report_metric else [])
    gap = None if grid.within_points is None or not within else grid.within_points / points_per_unit(grid.metric)
    for lr_name in grid.lr:
        for P in sorted({r["P"] for r in records}):
            for label, base in pairs:
                if not all(any((r["lr"], r["label"], r["P"]) == (lr_name, x, P) for r in records)
                           for x in (label, base)):
                    continue
                row = {"lr": lr_name, "P": P, "label": label, "baseline": base, "no_value": {}}
                for key in keys:
                    a, b = by_seed(records, lr_name, label, P, key), by_seed(records, lr_name, base, P, key)
                    row[key] = compare_with_baseline(a, b, gap if key == "metric" else None)
                    if row[key] is None:  # nothing to pair: say which runs failed
                        row["no_value"][key] = fmt_left_out({"left_out": {"A": failures(a), "B": failures(b)},
                                                             "runs": {"A": len(a), "B": len(b)}})
                out.append(row)
    return out


def baseline_label(grid: Grid, records: list[dict]) -> str | None:
    """The grid entry the traffic is compared with: the entry named like the
    registry's baseline algorithm, else the first entry that runs it."""
    if BASELINE in grid.algos:
        return BASELINE
    return next((a for a in grid.algos for r in records if r["label"] == a and r.get("algo") == BASELINE), None)


def family_cells(grid: Grid, records: list[dict]) -> list[dict]:
    """One dict per (lr setting, algorithm entry, P) that has runs, over the
    seeds that finished: the test metric's ``mean``/``std``/``min``/``max``
    (of the model averaged over ranks when they differ), ``n``, ``n_ok``,
    ``diverged``, ``at_chance`` (collapsed runs, left out like the diverged),
    ``family``, ``ci`` (half-width of the 95 % t interval);
    ``bytes_sent_per_step`` (bytes per rank per
    step, mean over seeds) and ``bytes_ratio`` (over the baseline entry's at
    the same lr and P; None without one); ``reached`` (seeds whose test metric
    reached ``target_accuracy``) and ``time_to_target_s`` (mean wall seconds
    of those; None when none did or the grid has no target);
    ``step_time_s`` (seconds per step after the warm-up, slowest rank, mean over
    seeds); ``consensus_distance`` (mean at the end; None for methods whose
    ranks stay identical) and ``rank0_mean`` (rank 0's own model, with
    eval-rank0)."""
    from ...distributed.algorithms import resolve

    tm = tested_metric(grid)
    records = mark_collapsed(records, grid.chance)
    tested = [{**r, "metric": r.get("reported") if grid.report_metric else r.get("metric")} for r in records]
    agg = aggregate(tested, grid.chance if "accuracy" in tm else None)
    base = baseline_label(grid, records)

    def ok(lr_name, label, P):
        return [r for r in records if (r["lr"], r["label"], r["P"]) == (lr_name, label, P) and r.get("status") == "ok"]

    def mean(xs):
        xs = [x for x in xs if x is not None]
        return statistics.fmean(xs) if xs else None

    cells = []
    for lr_name in grid.lr:
        for label in grid.algos:
            for P in sorted({r["P"] for r in records}):
                a = agg.get((lr_name, label, P))
                if a is None:
                    continue
                rs = ok(lr_name, label, P)
                family = next((r["family"] for r in rs if r.get("family")), None)
                if family is None:  # no finished run: the registry knows it
                    family = resolve(split_entry(label, grid.variants)[0]).cls.family
                sent = mean(r.get("bytes_sent_per_step") for r in rs)
                ref = mean(r.get("bytes_sent_per_step") for r in ok(lr_name, base, P)) if base else None
                times = [r["time_to_target"] for r in rs if r.get("time_to_target") is not None]
                rank0 = f"rank0_{tm}"
                cells.append({"lr": lr_name, "label": label, "P": P, "family": family, "metric": tm,
                              **{k: a[k] for k in ("n", "n_ok", "diverged", "collapsed", "failed", "mean", "std",
                                                   "ci", "min", "max")},
                              "bytes_sent_per_step": sent,
                              "bytes_ratio": sent / ref if sent is not None and ref else None,
                              "target": grid.target_accuracy, "reached": len(times),
                              "time_to_target_s": statistics.fmean(times) if times else None,
                              "step_time_s": mean(r.get("step_time_s") for r in rs),
                              "consensus_distance": mean(r.get("consensus_distance") for r in rs),
                              "rank0_mean": mean(r.get(rank0) for r in rs)})
    return cells


def oversubscribed(records: list[dict]) -> list[int]:
    """The P whose runs shared cores: the run itself saw more ranks than cores
    on a node (summary.json's ``oversubscribed``), or its ranks times threads
    per rank outnumber this machine's cores."""
    cores = threads.cores_on_node()
    return sorted({r["P"] for r in records
                   if r.get("status") == "ok" and not r.get("virtual") and (r.get("oversubscribed")
                                                   or r["P"] * (r.get("threads_per_rank") or 1) > cores)})
