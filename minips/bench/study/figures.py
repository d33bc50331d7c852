"""The figures of a study: the metric against P per algorithm (:func:`plot_study`), the
families' curves against time and traffic (:func:`plot_families`, drawn by :mod:`minips.plots`)
and the validation metric against projected time on each network (:func:`plot_time_to_accuracy`)."""
from __future__ import annotations

import statistics
from pathlib import Path

from ...kernels import threads
from ...rundir import atomic_savefig
from .aggregate import aggregate, family_cells, oversubscribed
from .grid import Grid, tested_metric

__all__ = ["plot_study", "plot_families", "plot_time_to_accuracy"]


def _mean_curve(runs: list[dict], metric: str) -> list[dict]:
    """The evaluation curves of the seeds of one cell, averaged point by point
    (the first k evaluations, k the fewest any seed has); ``mib_sent`` None
    when a seed did not count its traffic."""
    curves = [r.get("curve") or [] for r in runs]
    k = min((len(c) for c in curves), default=0)
    out = []
    for i in range(k):
        pts = [c[i] for c in curves]
        mib = [p.get("mib_sent") for p in pts]
        proj = [p.get("projected_time_s") for p in pts]
        after = [p.get("wall_after_warmup_s") for p in pts]
        out.append({"wall_time_s": statistics.fmean(p["wall_time_s"] for p in pts),
                    "wall_after_warmup_s": None if None in after else statistics.fmean(after),
                    "mib_sent": None if None in mib else statistics.fmean(mib),
                    "projected_time_s": None if None in proj else statistics.fmean(proj),
                    metric: statistics.fmean(p[metric] for p in pts)})
    return out


def plot_families(grid: Grid, records: list[dict], out_dir: Path, stem: str = "study",
                  cells: list[dict] | None = None) -> list[Path]:
    """Per learning-rate setting, with one panel per P and one line or point
    per algorithm entry (means over seeds): ``{stem}-{lr}-time.png`` (the test
    metric against wall seconds), ``{stem}-{lr}-bytes.png`` (against the
    cumulative MiB each rank sent) and ``{stem}-{lr}-traffic.png`` (the final
    test metric against MiB per step, log scale, each point labelled, bars
    the 95 % t interval over seeds). The same drawing code as ``compare``'s figures
    (:mod:`minips.plots`)."""
    from ...plots import plot_accuracy_vs_traffic, plot_method_curves

    cells = family_cells(grid, records) if cells is None else cells
    tm = tested_metric(grid)
    over = oversubscribed(records)
    paths = []
    for lr_name in grid.lr:
        cs = {(c["label"], c["P"]): c for c in cells if c["lr"] == lr_name}
        if not cs:
            continue
        panels, timed = [], []
        for P in sorted({c["P"] for c in cs.values()}):
            methods = []
            for a in grid.algos:
                c = cs.get((a, P))
                rs = [r for r in records if (r["lr"], r["label"], r["P"]) == (lr_name, a, P)
                      and r.get("status") == "ok"]
                if c is None or not rs:
                    continue
                b = c["bytes_sent_per_step"]
                methods.append({"name": a, "algo": rs[0].get("algo") or "", "curve": _mean_curve(rs, tm),
                                "final": c["mean"], "final_ci": c["ci"] if c["n_ok"] > 1 else None,
                                "mib_per_step": None if b is None else b / 2**20})
            panels.append((f"P={P}, lr setting {lr_name}, mean over seeds", methods))
            timed.append((f"P={P}, lr setting {lr_name}, mean over seeds"
                           + (f"\noversubscribed ({P} ranks on {threads.cores_on_node()} cores): times not comparable"
                              if P in over else ""), methods))
        files = [out_dir / f"{stem}-{lr_name}-{suffix}.png" for suffix in ("time", "bytes", "traffic")]
        x_time = "projected_time_s" if any(r.get("virtual") for r in records) else "wall_time_s"
        drawn = [plot_method_curves(timed, files[0], x_time, tm),
                 plot_method_curves(panels, files[1], "mib_sent", tm), plot_accuracy_vs_traffic(panels, files[2], tm)]
        paths += [f for f, ok in zip(files, drawn) if ok]
    return paths


def plot_study(grid: Grid, records: list[dict], out_dir: Path, title: str = "", stem: str = "study") -> list[Path]:
    """One PNG per learning-rate setting: the metric against P per algorithm
    (mean over seeds, bars = the 95 % t interval of the mean; none for one seed)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    agg = aggregate(records, grid.chance)
    paths = []
    ranks = sorted({r["P"] for r in records})
    for lr_name in grid.lr:
        if not any(r["lr"] == lr_name for r in records):
            continue
        fig, ax = plt.subplots(figsize=(10, 4.5))
        labels = [a for a in grid.algos if any(r["label"] == a for r in records)]
        width = 0.8 / max(1, len(labels))
        colors = plt.get_cmap("tab20").colors  # tab10 repeats after ten algorithms
        markers = "osD^v<>p*hX"
        for i, lab in enumerate(labels):
            xs, ys, lo, hi = [], [], [], []
            for j, P in enumerate(ranks):
                a = agg.get((lr_name, lab, P))
                if a and a["mean"] is not None:
                    x = j + (i - (len(labels) - 1) / 2) * width
                    h = a["ci"] or 0.0  # the 95 % CI's half-width; no bar for one seed
                    xs.append(x), ys.append(a["mean"]), lo.append(h), hi.append(h)
            if xs:
                ax.errorbar(xs, ys, yerr=[lo, hi], fmt=markers[i % len(markers)], ms=4, capsize=2, label=lab,
                            color=colors[(2 * i) % 20 if i < 10 else (2 * i + 1) % 20])
        ax.set_xticks(range(len(ranks)), [f"P={P}" for P in ranks])
        ax.set_ylabel(grid.metric.replace("_", " "))
        ax.grid(alpha=0.3, axis="y")
        ax.set_title(f"{title} ({lr_name}): mean over seeds, bars: 95 % t interval of the mean")
        ax.legend(fontsize=7, ncol=2, loc="center left", bbox_to_anchor=(1.01, 0.5))
        fig.tight_layout()
        paths.append(_save(fig, out_dir / f"{stem}-{lr_name}.png", 120))
    return paths


def _spread(runs: list[dict]) -> tuple[list, list, list, list]:
    """Point by point over a cell's seeds (the first k evaluations, k the fewest
    any seed has): the mean projected seconds, the mean value and the min and
    max value."""
    curves = [c["points"] for c in runs if c["points"]]
    k = min((len(c) for c in curves), default=0)
    xs = [statistics.fmean(c[i][0] for c in curves) for i in range(k)]
    vals = [[c[i][1] for c in curves] for i in range(k)]
    return xs, [statistics.fmean(v) for v in vals], [min(v) for v in vals], [max(v) for v in vals]


def plot_time_to_accuracy(grid: Grid, records: list[dict], cells: list[dict], out_dir: Path,
                          stem: str = "study") -> list[Path]:
    """One PNG per (learning-rate setting, network), ``{stem}-{lr}-tta-{network}.png``:
    panels of P (rows) x phi (columns), the grid metric (validation) against
    projected seconds on that network, a line per algorithm entry (mean over
    seeds) with its seeds' min-max band, the target as a dashed line and the
    budget as a dotted one (:mod:`.timeaxis`). None without ``cells``."""
    if not cells:
        return []
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .timeaxis import seed_curves

    colors = plt.get_cmap("tab10").colors
    paths = []
    for lr_name in grid.lr:
        ranks = sorted({c["P"] for c in cells if c["lr"] == lr_name})
        for network in grid.networks:
            if not ranks:
                continue
            fig, axes = plt.subplots(len(ranks), len(grid.phis), figsize=(5.5 * len(grid.phis), 3.8 * len(ranks)),
                                     squeeze=False)
            for i, P in enumerate(ranks):
                for j, phi in enumerate(grid.phis):
                    ax = axes[i][j]
                    for n, label in enumerate(grid.algos):
                        xs, mean, lo, hi = _spread(seed_curves(records, lr_name, label, P, network, phi))
                        if not xs:
                            continue
                        color = colors[n % len(colors)]
                        ax.plot(xs, mean, "-o", ms=2.5, lw=1.2, color=color, label=label)
                        ax.fill_between(xs, lo, hi, color=color, alpha=0.18, lw=0)
                    c = next((c for c in cells if (c["lr"], c["P"], c["network"], c["phi"]) ==
                              (lr_name, P, network, phi)), None)
                    if c is not None:
                        ax.axhline(c["target"], ls="--", lw=0.8, color="0.3")
                        if c["budget_s"] is not None:
                            ax.axvline(c["budget_s"], ls=":", lw=0.8, color="0.3")
                    ax.set_title(f"P={P}, phi={phi:g}", fontsize=9)
                    ax.set_xlabel(f"projected seconds on {network}")
                    ax.set_ylabel(grid.metric.replace("_", " "))
                    ax.grid(alpha=0.3)
            handles, labels = axes[0][0].get_legend_handles_labels()
            fig.legend(handles, labels, fontsize=8, loc="upper center", ncol=min(4, max(1, len(labels))),
                       bbox_to_anchor=(0.5, 1.0))
            fig.suptitle(f"{grid.metric.replace('_', ' ')} against projected time on {network}, lr setting "
                         f"{lr_name}: mean over seeds, band min-max; dashed: target, dotted: budget", fontsize=9,
                         y=0.01, va="bottom")
            height = 3.8 * len(ranks)  # the legend above and the caption below take a quarter inch each
            fig.tight_layout(rect=(0, 0.25 / height, 1, 1 - 0.3 / height))
            paths.append(_save(fig, out_dir / f"{stem}-{lr_name}-tta-{network}.png", 110))
    return paths


def _save(fig, path: Path, dpi: int) -> Path:
    """Write ``fig`` to ``path`` atomically and close it (also when the write fails); returns ``path``."""
    import matplotlib.pyplot as plt
    try:
        atomic_savefig(fig, path, dpi=dpi)
    finally:
        plt.close(fig)
    return path
