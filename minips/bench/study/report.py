"""The markdown reports of a study: per-metric tables over seeds, the paired comparisons
with the baseline and the contrasts, the validation split's choices, and the families table."""
from __future__ import annotations

from ...distributed.algorithms import BASELINE
from ...kernels import threads
from ...stats import CONFIDENCE, COLLAPSE_MARGIN, NO_DIFFERENCE, compare_with_baseline, fmt_diff, fmt_target, \
    points_per_unit
from .aggregate import aggregate, baseline_label, by_seed, contrasts, family_cells, mark_collapsed, oversubscribed, \
    paired_comparisons
from .grid import Grid, tested_metric

__all__ = ["markdown_report", "paired_report", "families_report"]


def _failures(a: dict, total: bool) -> str:
    """``2 div, 1 collapsed`` (``total``: ``div 2/3, collapsed 1/3``) of an :func:`aggregate` cell."""
    parts = []
    for key, word in (("diverged", "div"), ("collapsed", "collapsed"), ("failed", "failed")):
        k = a.get(key) or 0
        if key == "failed":  # runs neither finished nor diverged nor collapsed (crashed, timed out)
            k = a["n"] - a["n_ok"] - (a.get("diverged") or 0) - (a.get("collapsed") or 0)
        if k:
            parts.append(f"{word} {k}/{a['n']}" if total else f"{k} {word}")
    return ", ".join(parts)


def _cell(a: dict | None, digits: int) -> str:
    if not a:
        return "-"
    if a["mean"] is None:
        return _failures(a, total=True)
    if a["n_ok"] == 1:  # no spread from one seed
        s = f"{a['mean']:.{digits}f} (1 seed)"
    else:
        s = (f"{a['mean']:.{digits}f} ± {a['ci']:.{digits}f} "
             f"({a['min']:.{digits}f}-{a['max']:.{digits}f}, {a['n_ok']} seeds)")
    left = _failures(a, total=False)
    return s + (f" [{left}: not in the mean]" if left else "")


def markdown_report(grid: Grid, records: list[dict], title: str = "") -> str:
    """Tables: per learning-rate setting, algorithm rows x P columns of
    ``mean ± std (min-max)`` over seeds, then the gap of each mean to the
    baseline's. With a validation metric and a ``report_metric``, the same
    tables for the reported (test) metric follow, and which algorithm the
    validation metric chose at each (lr, P), with its test value."""
    records = mark_collapsed(records, grid.chance)
    text = _metric_report(grid, records, grid.metric, title)
    if not grid.report_metric or grid.report_metric == grid.metric:
        return text + "\n" + paired_report(grid, records)
    reported = [{**r, "metric": r.get("reported")} for r in records]
    text += "\n" + _metric_report(grid, reported, grid.report_metric, title,
                                   heading=f"# reported: {grid.report_metric} of the same runs")
    return text + "\n" + paired_report(grid, records) + "\n" + _choices(grid, records)


def paired_report(grid: Grid, records: list[dict], rows: list[dict] | None = None) -> str:
    """The paired comparison with the baseline as a markdown table (see
    :func:`paired_comparisons`): differences in points, 95 % t intervals,
    better / worse / no difference shown, the diverged and collapsed runs left
    out, and the target's verdict with the seeds that would resolve it."""
    records = mark_collapsed(records, grid.chance)
    rows = paired_comparisons(grid, records) if rows is None else rows
    text = _pair_table(grid, rows, grid.within_points)
    more = contrasts(grid, records)
    if more:
        text += "\n" + _pair_table(grid, more, None, "contrasts")
    return text


def _pair_table(grid: Grid, rows: list[dict], within, kind: str = "baseline") -> str:
    if not rows:
        return ""
    m, rm = grid.metric, grid.report_metric
    base = rows[0]["baseline"] if kind == "baseline" else "B"
    unit = "BLEU points" if "bleu" in m else "points (1 point = 0.01)"
    if kind != "baseline":
        head = ["lr", "P", "A", "B", "seeds", f"{m}: A minus B"] + ([f"{rm}: A minus B"] if rm else [])
        lines = [f"## contrasts: A against B, paired by seed ({int(CONFIDENCE * 100)} % t intervals, {unit})", "",
                 "As above, for the pairs the grid's `contrasts` names.", "",
                 "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in rows:
            seeds = r["metric"]["seeds"] if r["metric"] else []
            cells = [r["lr"], str(r["P"]), r["label"], r["baseline"], str(len(seeds)), _diff(r, "metric", m)]
            if rm:
                cells.append(_diff(r, "reported", rm))
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines) + "\n"
    head = ["lr", "P", "algorithm", "seeds", f"{m} minus {base}'s"] + ([f"{rm} minus {base}'s"] if rm else [])
    if within is not None:
        head.append(f"within {within:g} of {base} ({m})")
    lines = [f"## paired by seed against {base} ({int(CONFIDENCE * 100)} % t intervals, {unit})", "",
             f"Per seed, the run's {m} minus {base}'s with the same seed (same initial weights, partition and data "
             "order), then the mean of those differences and its t interval (n - 1 degrees of freedom). "
             f"**better**: the interval lies above 0; **worse**: below 0; **{NO_DIFFERENCE}**: the interval holds 0 "
             "(these seeds cannot tell the two apart; that is not parity)."
             + _failed_legend(grid)
             + (f" {m} chooses; {rm} is reported beside it and chooses nothing." if rm else "")
             + (f" Target: within {within:g} points of {base}: **met** when the interval's lower end is above "
                f"-{within:g}, **missed** when its upper end is below -{within:g}, else **unresolved**. An interval "
                f"wider than the target (half-width {within:g} points or more) cannot show parity. The seeds that "
                "would resolve an unresolved target are a guide that holds only if the mean and spread stay as "
                "observed." if within is not None else ""), "", "| " + " | ".join(head) + " |",
             "|" + "---|" * len(head)]
    for r in rows:
        seeds = r["metric"]["seeds"] if r["metric"] else []
        cells = [r["lr"], str(r["P"]), r["label"], str(len(seeds)), _diff(r, "metric", m)]
        if rm:
            cells.append(_diff(r, "reported", rm))
        if within is not None:
            cells.append(fmt_target(r["metric"], points_per_unit(m)))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _failed_legend(grid: Grid) -> str:
    chance = "" if grid.chance is None else (
        f"; **collapsed**: it finished at chance ({grid.metric} below {grid.chance + COLLAPSE_MARGIN:g})")
    return (" A failed run has no value and is left out of every mean and pair, and the cell counts it "
            f"(**diverged**: a non-finite loss stopped it{chance}).")


def _diff(row: dict, key: str, metric: str) -> str:
    """One comparison cell: the difference in points with its interval and verdict and the runs left out,
    or, when nothing was left to pair, which runs failed."""
    why = row.get("no_value", {}).get(key)
    if row[key] is None and why:
        return f"no value: {why}"
    return fmt_diff(row[key], points_per_unit(metric))


def _choices(grid: Grid, records: list[dict]) -> str:
    """Which algorithm the validation metric chose per (lr, P), its reported
    value, and whether the choice is resolved: the chosen entry against the
    runner-up, paired by seed (no difference shown: the data do not single it out)."""
    records = mark_collapsed(records, grid.chance)
    agg = aggregate(records, None)
    rep = aggregate([{**r, "metric": r.get("reported")} for r in records], None)
    lines = [f"## chosen by {grid.metric} (validation split); {grid.report_metric} reported", "",
             f"Defaults are chosen by the mean {grid.metric} over seeds, among all algorithms except "
             f"{BASELINE}; {grid.report_metric} is only reported (it chose nothing). The last column pairs the "
             "chosen entry with the runner-up by seed (95 % t interval of the difference, points): "
             f"**{NO_DIFFERENCE}** means these seeds do not tell the two apart.", "",
             f"| lr | P | chosen by {grid.metric} | its {grid.metric} | its {grid.report_metric} | "
             f"{BASELINE}'s {grid.report_metric} | against the runner-up |", "|---|---|---|---|---|---|---|"]
    for (lr_name, P) in sorted({(k[0], k[2]) for k in agg}):
        cands = sorted(((a["mean"], k[1]) for k, a in agg.items()
                        if k[0] == lr_name and k[2] == P and k[1] != BASELINE and a["mean"] is not None),
                       reverse=True)
        if not cands:
            continue
        best = cands[0][1]
        r, s = rep.get((lr_name, best, P)), rep.get((lr_name, BASELINE, P))
        vs = "-"
        if len(cands) > 1:
            second = cands[1][1]
            d = compare_with_baseline(by_seed(records, lr_name, best, P, "metric"),
                                      by_seed(records, lr_name, second, P, "metric"))
            if d is not None:
                vs = f"{second}: {fmt_diff(d, points_per_unit(grid.metric))}"
        lines.append(f"| {lr_name} | {P} | {best} | {cands[0][0]:.4f} | {_fmt_mean(r)} | {_fmt_mean(s)} | {vs} |")
    return "\n".join(lines) + "\n"


def _fmt_mean(a: dict | None) -> str:
    if not a or a["mean"] is None:
        return "-" if not a else _failures(a, total=True)
    left = _failures(a, total=False)
    return f"{a['mean']:.4f} ({a['n_ok']} seeds" + (f"; {left}: not in the mean)" if left else ")")


def _metric_report(grid: Grid, records: list[dict], metric: str, title: str = "", heading: str = "") -> str:
    chance = grid.chance if "accuracy" in metric else None
    agg = aggregate(records, chance)
    digits = 2 if "bleu" in metric else 4
    lines = [heading or f"# {title or 'study'}: {metric} (mean ± 95 % CI (min-max) over seeds)", "",
             "Cells: mean ± half-width of its 95 % t confidence interval (n - 1 degrees of freedom; min-max, "
             "number of seeds) over the seeds that finished; "
             "`div k/n`: k of n runs stopped on a non-finite loss; `collapsed k/n`: k of n runs ended at chance "
             + ("" if chance is None else f"(below {chance + COLLAPSE_MARGIN:g}) ")
             + "without a non-finite loss; `[k div, k collapsed: not in the mean]`: failed runs left out of the "
             "mean beside them (a collapse is a failure, not an accuracy).", "",
             f"grid: `{grid.source}`; seeds in the grid {grid.seeds} (each cell counts the ones that ran); "
             "train options: "
             + ", ".join(f"{k}={v}" for k, v in grid.train.items()), ""]
    shared = [r for r in records if r.get("status") == "ok" and r.get("oversubscribed")]
    if shared:
        o = shared[0]["oversubscribed"]
        lines += [f"**Ranks shared cores** in {len(shared)} of {sum(r.get('status') == 'ok' for r in records)} "
                  f"finished runs (P = {', '.join(map(str, sorted({r['P'] for r in shared})))}; e.g. "
                  f"{o['ranks_on_node']} ranks on {o['cores']} core(s) of a node): their ranks took turns, so "
                  "their times are not comparable; the metrics above do not depend on it.", ""]
    ranks = sorted({r["P"] for r in records})
    labels = [a for a in grid.algos if any(r["label"] == a for r in records)]
    for lr_name, lr_opts in grid.lr.items():
        if not any(r["lr"] == lr_name for r in records):
            continue
        lines += [f"## lr setting `{lr_name}`: " + ", ".join(f"{k}={v}" for k, v in lr_opts.items()), ""]
        lines += ["| algorithm | " + " | ".join(f"P={P}" for P in ranks) + " |", "|---|" + "---|" * len(ranks)]
        for lab in labels:
            lines.append(f"| {lab} | " + " | ".join(_cell(agg.get((lr_name, lab, P)), digits) for P in ranks) + " |")
        lines.append("")
    return "\n".join(lines)


def _machines(records: list[dict]) -> str:
    """Where the times were taken: the CPUs and the range of end-of-run load averages the runs recorded."""
    ok = [r for r in records if r.get("status") == "ok"]
    cpus = sorted({r["cpu"] for r in ok if r.get("cpu")})
    loads = [r["load_average_end"][0] for r in ok if r.get("load_average_end")]
    if not cpus:
        return "Times taken on a CPU the runs did not record (runs made before summary.json recorded it)."
    load = f"; 1-minute load average at the runs' ends {min(loads):g}-{max(loads):g}" if loads else ""
    return f"Times taken on: {'; '.join(cpus)}{load}."


def families_report(grid: Grid, records: list[dict], cells: list[dict] | None = None) -> str:
    """The families table per learning-rate setting: one row per algorithm
    entry (with its family, rows grouped by family in the order the grid names
    them), per P the test metric (mean ± 95 % CI over seeds), MiB sent per rank
    per step and its ratio to the baseline's, milliseconds per step, seconds to
    the target and the consensus distance at the end; a caption says what each column is and
    which P were oversubscribed (their times not comparable)."""
    cells = family_cells(grid, records) if cells is None else cells
    tm = tested_metric(grid)
    digits = 2 if "bleu" in tm else 4
    base = baseline_label(grid, records)
    ranks = sorted({c["P"] for c in cells})
    over = oversubscribed(records)
    has_rank0 = any(c["rank0_mean"] is not None for c in cells)
    target = grid.target_accuracy
    lines = []
    for lr_name in grid.lr:
        cs = {(c["label"], c["P"]): c for c in cells if c["lr"] == lr_name}
        if not cs:
            continue
        labels = [a for a in grid.algos if any((a, P) in cs for P in ranks)]
        fam = {a: next(cs[(a, P)]["family"] for P in ranks if (a, P) in cs) for a in labels}
        order = list(dict.fromkeys(fam[a] for a in labels))
        labels.sort(key=lambda a: order.index(fam[a]))  # stable: the grid's order within a family
        head = ["family", "algorithm"]
        for P in ranks:
            head += [f"P={P} {tm.replace('_', ' ')}", *([f"P={P} rank 0"] if has_rank0 else []),
                     f"P={P} MiB/step" + (f" (vs {base})" if base else ""),
                     f"P={P} ms/step", *([f"P={P} s to {target:g}"] if target is not None else []),
                     f"P={P} consensus"]
        lines += [f"## families, lr setting `{lr_name}`: all methods side by side", "",
                  "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for a in labels:
            row = [fam[a], a]
            for P in ranks:
                c = cs.get((a, P))
                if c is None:
                    row += ["-"] * (4 + has_rank0 + (target is not None))
                    continue
                if c["mean"] is None:
                    acc = _failures(c, total=True)
                else:
                    acc = (f"{c['mean']:.{digits}f} (1 seed)" if c["n_ok"] == 1
                           else f"{c['mean']:.{digits}f} ± {c['ci']:.{digits}f}")
                    if c["n_ok"] < c["n"]:
                        acc += f" ({c['n_ok']}/{c['n']} seeds; {_failures(c, total=False)}: not in the mean)"
                row.append(acc)
                if has_rank0:
                    row.append("-" if c["rank0_mean"] is None else f"{c['rank0_mean']:.{digits}f}")
                b = c["bytes_sent_per_step"]
                row.append("n/a" if b is None else f"{b / 2**20:.3g}"
                           + ("" if c["bytes_ratio"] is None else f" ({c['bytes_ratio']:.3g}x)"))
                st = c["step_time_s"]
                row.append("n/a" if st is None else f"{1e3 * st:.2f}")
                if target is not None:
                    t = c["time_to_target_s"]
                    row.append("not reached" if t is None else f"{t:.1f}"
                               + ("" if c["reached"] == c["n_ok"] else f" ({c['reached']}/{c['n_ok']} seeds)"))
                row.append("-" if c["consensus_distance"] is None else f"{c['consensus_distance']:.3g}")
            lines.append("| " + " | ".join(row) + " |")
        lines.append("")
    cap = [f"{tm.replace('_', ' ')}: mean ± half-width of the 95 % t interval over the seeds that finished (of the "
           "model averaged over "
           "ranks for methods whose ranks hold different weights)"
           + ("; rank 0: the mean over seeds of rank 0's own model" if has_rank0 else "") + ". "
           "MiB/step: MiB each rank sent per training step (mean over ranks, steps and seeds)"
           + (f", in brackets over {base}'s at the same P" if base else "") + ". "
           "ms/step: milliseconds per training step after the warm-up, of the slowest rank (mean over seeds)"
           + (f", on an EMULATED {grid.train['network']} network" if grid.train.get("network") else "") + ". "]
    virt = sorted({r["P"] for r in records if r.get("virtual")})
    if virt:
        net = next((r["projected_network"] for r in records if r.get("projected_network")), "?")
        cap.append(f"VIRTUAL: the runs at P = {', '.join(map(str, virt))} ran as threads of one process: their "
                   f"ms/step are not cluster times; their s to the target are PROJECTED (steps x the algorithm's "
                   f"cost model on {net} from the compute measured per rank). ")
    if target is not None:
        cap.append(f"s to {target:g}: wall seconds from the start until the first evaluation (once per epoch) "
                   f"with {tm.replace('_', ' ')} at or above {target:g}, mean over the seeds that reached it "
                   "(k/n seeds when not all did); `not reached` when no seed did. ")
    else:
        cap.append("No seconds to a target: the grid has no target_accuracy (add e.g. target_accuracy = "
                   f"{'30' if 'bleu' in tm else '0.85'} and rerun with --report-only). ")
    if over:
        cap.append(f"Times at P = {', '.join(map(str, over))} are not comparable: those runs had more ranks "
                   f"(times threads per rank) than the {threads.cores_on_node()} cores of the machine writing this "
                   "report (oversubscribed), so they measure the sharing of cores as much as the method. ")
    cap.append("consensus: (1/P) sum_i ||w_i - mean w||^2 at the last evaluation, mean over seeds; `-`: a method "
               "whose ranks stay identical. ")
    cap.append(_machines(records))
    return "\n".join(lines) + "\n" + "".join(cap) + "\n"
