"""Issue 52, item 6: which method reaches the target first, per network, compute interference phi
and P, and by how much; "none" where no method beats the baseline (sync).

    python scripts/time_to_accuracy_map.py [--raw RAW] [--grid GRID] [--out DIR] [--figure PNG] [--no-figures]

Reads only the committed raw runs (``RAW``, default ``docs/bench/time-to-accuracy/runs``): they are
copied into a temporary study folder and ``bench study GRID --report-only`` (default grid
``configs/study-time-to-accuracy.toml``) aggregates them, so the time-to-accuracy cells are the
study's own (:mod:`minips.bench.study.timeaxis`). Writes ``DIR/map.md`` and ``DIR/map.json``
(default ``DIR``: the folder above ``RAW``), the study's report beside them (``DIR/report/``: its
tables, JSON and its curves of validation accuracy against projected time, one figure per network)
and the figure (``--figure``; by default ``time-to-accuracy-map.png`` in ``docs/figures/``).

The rule (:func:`winners`): a method is a candidate in a cell when every one of its seeds reached
the target (a seed that never does counts against it: its time is not known); each is paired
with the baseline by seed (the seeds both ran: a partial study compares like with like), and the
winner is the candidate whose time to target is most below the baseline's on average over those
seeds (none below: "none"). Its verdict, from the 95 % t interval of the per-seed differences
(:mod:`minips.stats`): **faster** when
the interval lies below 0, **no difference shown** when it holds 0 (a tie: the seeds cannot tell
the two apart), **within one evaluation** when it excludes 0 but the difference is smaller than one
evaluation interval of the curves (``eval-every`` steps x the larger step time: each seed's time is that of
its first evaluation at or above the target, so the true crossing can lie up to one interval
earlier; seeds that agree to the step give a zero-width interval however small the difference),
and with one seed no interval (reported, not judged). "none": no method's paired mean is
below the baseline's, or no other method reached the target on every seed. When the baseline missed the
target on a seed (the target is its mean final accuracy less the points), the fastest method is
named with the verdict "BASELINE k/n reached" and no pairing.

The grid's ``contrasts`` ("A - B") add a table each to ``map.md`` (and ``contrasts.json``): per
cell both entries' seconds to the target and their difference paired by seed (:func:`contrast_rows`),
the question of issue 52 being pseudo-sync against DDP-style overlap (``overlap-sync``) as well as sync.
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RAW = ROOT / "docs" / "bench" / "time-to-accuracy" / "runs"
GRID = ROOT / "configs" / "study-time-to-accuracy.toml"
FIGURE = ROOT / "docs" / "figures" / "time-to-accuracy-map.png"


def _all_reached(c: dict) -> bool:
    return c["n"] > 0 and c["reached"] == c["n"] and c["time_to_target"] is not None


def _unresolved(ca: dict, cb: dict, diff: float, eval_every: int | None) -> bool:
    """Whether a paired difference of times to the target is smaller than the curves can resolve:
    a seed's time is that of its first evaluation at or above the target, so its true crossing lies
    up to one evaluation interval (``eval_every`` steps x the cell's step time) earlier, and two
    entries' times differ by up to the larger interval for that reason alone. Seeds that agree to
    the step give a zero-width t interval however small the difference; this keeps such a
    difference from being called a win."""
    if not eval_every or ca.get("step_time_s") is None or cb.get("step_time_s") is None:
        return False
    return abs(diff) < eval_every * max(ca["step_time_s"], cb["step_time_s"])


def _paired(ca: dict, cb: dict) -> list[str]:
    """The seeds both cells reached the target on, in seed order."""
    return sorted(set(ca["time_to_target_by_seed"]) & set(cb["time_to_target_by_seed"]), key=int)


def _compare(ca: dict, cb: dict, eval_every: int | None) -> tuple[dict, str]:
    """``ca`` against ``cb`` paired by seed (:func:`_paired`, at least one seed): ``diff`` (``mean``
    and ``ci`` half-width, None with one seed, of ca's seconds minus cb's) and the outcome: "one
    seed", "no difference shown" (the 95 % t interval holds 0), "within one evaluation"
    (:func:`_unresolved`), "first" (ca sooner) or "second" (cb sooner). The one rule of both the
    map's verdict and its contrasts."""
    from minips.stats import t_interval
    ta, tb = ca["time_to_target_by_seed"], cb["time_to_target_by_seed"]
    iv = t_interval([ta[k] - tb[k] for k in _paired(ca, cb)])
    mean, half = iv.mean, (iv.half_width if iv.has_ci else None)
    outcome = ("one seed" if half is None else "no difference shown" if mean - half <= 0 <= mean + half else
               "within one evaluation" if _unresolved(ca, cb, mean, eval_every) else
               "first" if mean < 0 else "second")
    return {"mean": mean, "ci": half}, outcome


def winners(cells: list[dict], baseline: str, eval_every: int | None = None) -> list[dict]:
    """One row per (lr, network, phi, P) of the study's ``time_to_accuracy`` cells: ``winner``
    (a label, or None: "none"), ``time_s`` and ``baseline_s`` (its and the baseline's mean seconds
    to the target over the seeds both ran), ``speedup`` (their ratio), ``diff`` (winner minus
    baseline, paired by seed: ``mean``, ``ci`` half-width or None with one seed) and ``verdict``
    (faster / no difference shown / within one evaluation (:func:`_unresolved`, with
    ``eval_every`` the curves' steps between evaluations) / one seed / none). The winner is the
    candidate with the most negative mean paired difference from the baseline (a method and the
    baseline compared on the same seeds, also while a study is partial), the study's order
    breaking ties; none when no candidate's is below 0."""
    keys = list(dict.fromkeys((c["lr"], c["network"], c["phi"], c["P"]) for c in cells))  # the study's order
    rows = []
    for lr, net, phi, P in keys:
        here = [c for c in cells if (c["lr"], c["network"], c["phi"], c["P"]) == (lr, net, phi, P)]
        base = next((c for c in here if c["label"] == baseline), None)
        cands = [c for c in here if _all_reached(c) and c["label"] != baseline]
        row = {"lr": lr, "network": net, "phi": phi, "P": P, "winner": None, "time_s": None,
               "baseline_s": base["time_to_target"]["mean"] if base and _all_reached(base) else None,
               "speedup": None, "diff": None, "verdict": "none",
               "reached": {c["label"]: f"{c['reached']}/{c['n']}" for c in here}}
        if base is None or not _all_reached(base):  # the baseline missed its own target on a seed: no pairing
            best = min(cands, key=lambda c: c["time_to_target"]["mean"], default=None)
            if best is not None:
                row.update(winner=best["label"], time_s=best["time_to_target"]["mean"],
                           verdict=f"{baseline} {base['reached']}/{base['n']} reached" if base else
                           f"no {baseline} run")
            rows.append(row)
            continue
        diffs = {}
        for c in cands:
            seeds = _paired(c, base)
            if seeds:
                ta, tb = c["time_to_target_by_seed"], base["time_to_target_by_seed"]
                diffs[c["label"]] = (c, seeds, [ta[k] - tb[k] for k in seeds])
        best = min(diffs.values(), key=lambda x: statistics.fmean(x[2]), default=None)
        if best is None or statistics.fmean(best[2]) >= 0:
            rows.append(row)
            continue
        c, seeds, _ = best
        diff, outcome = _compare(c, base, eval_every)  # its mean is below 0: "first" is "faster"
        t_c = statistics.fmean(c["time_to_target_by_seed"][k] for k in seeds)
        t_b = statistics.fmean(base["time_to_target_by_seed"][k] for k in seeds)
        row.update(winner=c["label"], time_s=t_c, baseline_s=t_b, speedup=t_b / t_c,
                   diff=diff, verdict="faster" if outcome == "first" else outcome)
        rows.append(row)
    return rows


def contrast_rows(cells: list[dict], a: str, b: str, eval_every: int | None = None) -> list[dict]:
    """One row per (lr, network, phi, P) holding both entries: each one's mean seconds to the target
    (``a_s``, ``b_s``: None unless every seed reached it) and ``a_reached`` / ``b_reached`` (k/n), the
    paired difference ``diff`` (a minus b over the seeds both reached: ``mean``, ``ci`` half-width or
    None with one seed) and ``verdict``: "A first" / "B first" (the interval excludes 0), "no
    difference shown" (it holds 0), "within one evaluation" (:func:`_unresolved`), "one seed", or
    "A k/n reached" (an entry that missed the target on a seed: its time is not known, nothing is
    paired)."""
    keys = list(dict.fromkeys((c["lr"], c["network"], c["phi"], c["P"]) for c in cells))
    rows = []
    for lr, net, phi, P in keys:
        ca, cb = (next((c for c in cells if (c["lr"], c["network"], c["phi"], c["P"], c["label"])
                        == (lr, net, phi, P, x)), None) for x in (a, b))
        if ca is None or cb is None:
            continue
        row = {"lr": lr, "network": net, "phi": phi, "P": P, "a": a, "b": b,
               "a_s": ca["time_to_target"]["mean"] if _all_reached(ca) else None,
               "b_s": cb["time_to_target"]["mean"] if _all_reached(cb) else None,
               "a_reached": f"{ca['reached']}/{ca['n']}", "b_reached": f"{cb['reached']}/{cb['n']}",
               "diff": None}
        missed = [(x, c) for x, c in ((a, ca), (b, cb)) if not _all_reached(c)]
        if missed:
            row["verdict"] = "; ".join(f"{x} {c['reached']}/{c['n']} reached" for x, c in missed)
        else:
            row["diff"], outcome = _compare(ca, cb, eval_every)
            row["verdict"] = {"first": f"{a} first", "second": f"{b} first"}.get(outcome, outcome)
        rows.append(row)
    return rows


def _diff_text(d: dict | None) -> str:
    """``-5 [-6, -4]`` (mean and its 95 % interval), ``-5`` with one seed, ``-`` without a pairing."""
    if d is None:
        return "-"
    return f"{d['mean']:+.3g}" + (f" [{d['mean'] - d['ci']:+.3g}, {d['mean'] + d['ci']:+.3g}]"
                                  if d["ci"] is not None else "")


def contrast_table(rows: list[dict]) -> str:
    if not rows:
        return ""
    a, b = rows[0]["a"], rows[0]["b"]
    lines = [f"## {a} against {b}: seconds to the target", "",
             f"| lr | network | phi | P | {a}'s s (reached) | {b}'s s (reached) | {a} minus {b}, s (95 % t, "
             "paired by seed) | verdict |",
             "|---|---|---:|---:|---:|---:|---|---|"]
    for r in rows:
        def s(x, k):
            return (f"{x:.3g}" if x is not None else "-") + f" ({k})"
        lines.append(f"| {r['lr']} | {r['network']} | {r['phi']:g} | {r['P']} | {s(r['a_s'], r['a_reached'])} | "
                     f"{s(r['b_s'], r['b_reached'])} | {_diff_text(r['diff'])} | {r['verdict']} |")
    return "\n".join(lines) + "\n"


def table(rows: list[dict], baseline: str) -> str:
    lines = [f"| lr | network | phi | P | first to the target | its s | {baseline}'s s | speed-up | "
             f"minus {baseline}, s (95 % t, paired by seed) | verdict |",
             "|---|---|---:|---:|---|---:|---:|---:|---|---|"]
    for r in rows:
        def s(x):
            return "-" if x is None else f"{x:.3g}"
        speedup = "-" if r["speedup"] is None else f"{r['speedup']:.2f}x"
        lines.append(f"| {r['lr']} | {r['network']} | {r['phi']:g} | {r['P']} | {r['winner'] or 'none'} | "
                     f"{s(r['time_s'])} | {s(r['baseline_s'])} | {speedup} | "
                     f"{_diff_text(r['diff'])} | {r['verdict']} |")
    return "\n".join(lines) + "\n"


def figure(rows: list[dict], path: Path, baseline: str, points: float) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from minips.rundir import atomic_savefig
    nets = list(dict.fromkeys(r["network"] for r in rows))
    phis = sorted({r["phi"] for r in rows})
    Ps = sorted({r["P"] for r in rows})
    fig, ax = plt.subplots(figsize=(3.2 * len(Ps) + 2.0, 0.75 * len(nets) * len(phis) + 1.4))
    ylabels = [f"{n}, phi={p:g}" for n in nets for p in phis]
    for i, (n, p) in enumerate((n, p) for n in nets for p in phis):
        for j, P in enumerate(Ps):
            r = next((r for r in rows if (r["network"], r["phi"], r["P"]) == (n, p, P)), None)
            if r is None:
                continue
            won = r["winner"] is not None and r["verdict"] == "faster"
            text = (f"none\n({baseline} first or no other method on every seed)" if r["winner"] is None else
                    f"{r['winner']}\n{r['speedup']:.2f}x ({r['verdict']})" if r["speedup"] is not None else
                    f"{r['winner']}\n({r['verdict']})")
            ax.add_patch(plt.Rectangle((j, i), 1, 1, color="#cfe8cf" if won else "#eeeeee", ec="white"))
            ax.text(j + 0.5, i + 0.5, text, ha="center", va="center", fontsize=7.5)
    ax.set_xlim(0, len(Ps))
    ax.set_ylim(len(ylabels), 0)
    ax.set_xticks([j + 0.5 for j in range(len(Ps))], [f"P = {P}" for P in Ps])
    ax.set_yticks([i + 0.5 for i in range(len(ylabels))], ylabels)
    ax.tick_params(length=0)
    for side in ("top", "right", "bottom", "left"):
        ax.spines[side].set_visible(False)
    ax.set_title(f"First method to the target ({baseline}'s final validation accuracy less {points:g} points)\n"
                 f"and its speed-up over {baseline}. Green: faster (95 % t interval of the paired per-seed\n"
                 "differences below 0); grey: none, a tie (no difference shown or within one evaluation)\n"
                 "or one seed", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        atomic_savefig(fig, path, dpi=120)
    finally:
        plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--raw", type=Path, default=RAW)
    ap.add_argument("--grid", type=Path, default=GRID)
    ap.add_argument("--out", type=Path, default=None, help="default: the folder above --raw")
    ap.add_argument("--figure", type=Path, default=FIGURE)
    ap.add_argument("--no-figures", dest="figures", action="store_false",
                    help="tables and JSON only: neither the map's figure nor the study report's (what the "
                         "test that rebuilds the tables runs)")
    args = ap.parse_args(argv)
    from minips.cli import main as cli
    from minips.distributed.algorithms import BASELINE
    out = args.out or args.raw.parent
    with tempfile.TemporaryDirectory(prefix="tta-map-") as tmp:
        shutil.copytree(args.raw, Path(tmp) / "runs")
        code = cli(["bench", "study", str(args.grid), "--out", tmp, "--report-only",
                    *([] if args.figures else ["--no-figures"])])
        if code:
            return code
        stem = args.grid.stem
        report = json.loads((Path(tmp) / f"{stem}.json").read_text())
        (out / "report").mkdir(parents=True, exist_ok=True)
        grid_path = args.grid.resolve()
        shown = str(grid_path.relative_to(ROOT)) if grid_path.is_relative_to(ROOT) else str(grid_path)
        for f in Path(tmp).glob(f"{stem}*"):
            if f.suffix in (".md", ".json"):  # the grid's path as the repository names it: the same on every clone
                (out / "report" / f.name).write_text(f.read_text().replace(str(grid_path), shown))
            elif "-tta-" in f.name:  # validation accuracy against projected time, per network (issue 52, item 3)
                shutil.copy2(f, out / "report" / f.name)
    eval_every = (report["grid"].get("train") or {}).get("eval-every")
    rows = winners(report["time_to_accuracy"], BASELINE, eval_every)
    grid = report["grid"]  # the grid as the study read it
    counts = []
    for P in sorted({r["P"] for r in rows}):
        found = [json.loads(f.read_text()) for f in sorted(args.raw.glob(f"P{P}-*/*/*/seed*/summary.json"))]
        failed = sum(not s.get("steps") for s in found)
        counts.append(f"P = {P}: {len(found)} of {len(grid['algos']) * len(grid['seeds'])} runs"
                      + (f" ({failed} diverged or failed)" if failed else ""))
    text = ("# Time to accuracy: the first method to the target, per network, phi and P\n\n"
            f"Rebuilt by `python scripts/time_to_accuracy_map.py` from the committed raw runs "
            f"({'; '.join(counts)}); the rule is in the script's docstring.\n\n" + table(rows, BASELINE))
    pairs = [contrast_rows(report["time_to_accuracy"], a, b, eval_every)
             for a, b in report["grid"].get("contrasts") or []]
    for crows in pairs:
        text += "\n" + contrast_table(crows)
    (out / "map.md").write_text(text)
    (out / "map.json").write_text(json.dumps(rows, indent=1) + "\n")
    (out / "contrasts.json").write_text(json.dumps(pairs, indent=1) + "\n")
    if args.figures:
        figure(rows, args.figure, BASELINE, float(grid["target_below_baseline"]))
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
