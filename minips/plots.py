"""Figures with matplotlib (Agg backend: works without a screen).

``python -m minips plot RUN_DIR [RUN_DIR ...] --out DIR`` draws, for runs
written by ``train`` or ``compare``: test accuracy per epoch and against wall
time, the stacked per-step timing breakdown, the per-step training loss and
predictor diagnostics (lambda, forecast cosine) from ``trace.csv``, and (when
the runs counted their traffic) accuracy against MiB sent with the consensus
distance of runs whose ranks hold different weights.
"""
from __future__ import annotations

from pathlib import Path

from .rundir import find_runs, load_run
from .timing import phase_names

__all__ = ["load_run", "find_runs", "plot_accuracy", "plot_breakdown", "plot_trace", "plot_traffic", "plot_runs"]

_COLORS = {"forward": "#4C72B0", "backward": "#55A868", "post": "#8172B2", "wait": "#C44E52",
           "predict": "#CCB974", "update": "#64B5CD"}


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _label(summary: dict) -> str:
    return summary.get("label") or summary["algo"]


def plot_accuracy(runs, path, metric: str = "test_accuracy") -> None:
    """Two panels: ``metric`` against epoch and against wall-clock seconds."""
    plt = _plt()
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    for r in runs:
        h = [x for x in r["summary"]["history"] if not x.get("partial")]  # complete epochs only
        if not h or metric not in h[0]:
            continue
        a.plot([x["epoch"] for x in h], [x[metric] for x in h], marker="o", label=r["name"])
        b.plot([x["wall_time_s"] for x in h], [x[metric] for x in h], marker="o", label=r["name"])
    a.set_xlabel("epoch")
    b.set_xlabel("wall time (s)")
    for ax in (a, b):
        ax.set_ylabel(metric.replace("_", " "))
        ax.grid(alpha=0.3)
    if a.lines:
        a.legend(fontsize=8)
    else:  # runs stopped (--max-steps) before their first complete epoch
        a.text(0.5, 0.5, "no complete epoch", ha="center", transform=a.transAxes)
    emulated = any(r["summary"].get("network_emulated") for r in runs)
    fig.suptitle(f"{metric.replace('_', ' ')}" + (" (EMULATED network)" if emulated else ""))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_breakdown(runs, path) -> None:
    """Stacked bars: mean seconds per step in each phase, one bar per run."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(5, 1.4 * len(runs) + 2), 4))
    names = [r["name"] for r in runs]
    bottom = [0.0] * len(runs)
    extra = iter(("#DD8452", "#937860", "#DA8BC3", "#8C8C8C", "#9EDAE5", "#FF9896"))
    for ph in phase_names([r["summary"]["time_breakdown"] for r in runs]):  # every phase any run timed
        vals = [1e3 * r["summary"]["time_breakdown"].get(ph, 0.0) for r in runs]
        if not any(vals) and ph not in _COLORS:
            continue
        ax.bar(names, vals, bottom=bottom, label=ph, color=_COLORS.get(ph) or next(extra, None))
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_ylabel("ms per step (mean over steps and ranks)")
    emulated = any(r["summary"].get("network_emulated") for r in runs)
    ax.set_title("timing breakdown" + (" (EMULATED network)" if emulated else ""))
    ax.legend(fontsize=8)
    plt.setp(ax.get_xticklabels(), rotation=20, ha="right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_trace(runs, path, smooth: int = 20) -> None:
    """Per-step training loss (moving average) and, where logged, the predictor's
    lambda and forecast cosine."""
    import numpy as np
    plt = _plt()
    has_pred = any(r["trace"] and "cos_forecast" in r["trace"][-1] for r in runs)
    fig, axes = plt.subplots(1, 3 if has_pred else 1, figsize=(14 if has_pred else 6, 4), squeeze=False)
    axes = axes[0]

    def series(r, key):
        xs = [int(row["step"]) for row in r["trace"] if row.get(key) not in (None, "")]
        ys = [float(row[key]) for row in r["trace"] if row.get(key) not in (None, "")]
        if len(ys) >= smooth:
            ys = np.convolve(ys, np.ones(smooth) / smooth, mode="valid").tolist()
            xs = xs[smooth - 1:]
        return xs, ys

    for r in runs:
        if not r["trace"]:
            continue
        axes[0].plot(*series(r, "loss"), label=r["name"])
        if has_pred:
            axes[1].plot(*series(r, "lambda"), label=r["name"])
            axes[2].plot(*series(r, "cos_forecast"), label=r["name"])
    axes[0].set_ylabel(f"training loss ({smooth}-step mean)")
    if not axes[0].lines:
        axes[0].text(0.5, 0.5, "no trace.csv", ha="center", transform=axes[0].transAxes)
    if has_pred:
        axes[1].set_ylabel("lambda (confidence in history)")
        axes[2].set_ylabel("cos(forecast, arrived gradient)")
    for ax in axes:
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    if axes[0].lines:
        axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_traffic(runs, path, metric: str = "test_accuracy") -> bool:
    """Left: the final ``metric`` against the MiB each rank sent during
    training (mean over ranks; log scale), one labelled point per run.
    Right, when runs let ranks hold different weights: the consensus distance
    ``(1/P) sum_i ||w_i - mean w||^2`` against the step (from trace.csv).
    Returns False (and writes nothing) when no run recorded its traffic."""
    plt = _plt()
    colors = plt.get_cmap("tab10").colors
    color = {r["name"]: colors[i % len(colors)] for i, r in enumerate(runs)}  # one colour per run, both panels
    pts = [(sum(r["summary"]["bytes_sent_per_rank"]) / len(r["summary"]["bytes_sent_per_rank"]) / 2**20,
            r["summary"].get(metric), r["name"]) for r in runs if r["summary"].get("bytes_sent_per_rank")]
    pts = [(x, y, n) for x, y, n in pts if x > 0 and y is not None]
    if not pts:
        return False
    from matplotlib.ticker import LogLocator, ScalarFormatter
    fig, (a, b) = plt.subplots(1, 2, figsize=(13, 4.2))
    for x, y, name in pts:
        a.scatter([x], [y], s=30, color=color[name])
        a.annotate(name, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
    a.set_xscale("log")
    a.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    a.xaxis.set_major_formatter(ScalarFormatter())
    a.xaxis.set_minor_formatter(plt.NullFormatter())
    a.margins(x=0.15)
    a.set_xlabel("MiB sent per rank during training (log scale)")
    a.set_ylabel(f"final {metric.replace('_', ' ')}")
    a.set_title("accuracy against traffic")
    a.grid(alpha=0.3, which="both")
    for r in runs:
        # 0 right after an average: not drawable on a log scale, and not the drift
        rows = [(int(t["step"]), float(t["consensus_distance"])) for t in r["trace"]
                if t.get("consensus_distance") not in (None, "") and float(t["consensus_distance"]) > 0]
        if rows:
            b.plot([s for s, _ in rows], [c for _, c in rows], marker="o", ms=3, color=color[r["name"]],
                   label=r["name"])
    if b.lines:
        b.set_yscale("log")
        b.set_xlabel("step (points: every --consensus-every steps; 0 right after an average is left out)",
                     fontsize=8)
        b.set_ylabel("consensus distance (1/P) sum ||w_i - mean w||^2")
        b.set_title("how far the ranks' models drift apart")
        b.grid(alpha=0.3, which="both")
        b.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))  # beside, not over, the lines
    else:
        b.text(0.5, 0.5, "every run kept its ranks identical", ha="center", transform=b.transAxes)
        b.set_axis_off()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def plot_topology(top, path) -> None:
    """A gossip graph: ranks on a circle, an edge per nonzero off-diagonal
    weight (an arrow when the graph is directed), the spectral gap in the title."""
    import numpy as np
    plt = _plt()
    P = top.P
    ang = 2 * np.pi * np.arange(P) / P
    xy = np.stack([np.cos(ang), np.sin(ang)], axis=1)
    fig, ax = plt.subplots(figsize=(5, 5))
    for i in range(P):
        for j in top.in_neighbors(i):  # j sends to i
            if top.directed:
                ax.annotate("", xy=xy[i], xytext=xy[j], arrowprops={"arrowstyle": "->", "color": "#4C72B0",
                                                                       "shrinkA": 9, "shrinkB": 9})
            elif j < i:
                ax.plot(*xy[[i, j]].T, color="#4C72B0", lw=0.8 + 2 * top.W[i, j], alpha=0.8)
    ax.scatter(*xy.T, s=260, color="white", edgecolor="black", zorder=3)
    for i in range(P):
        ax.text(*xy[i], str(i), ha="center", va="center", fontsize=8, zorder=4)
    tv = f", time-varying (step 0 of {top.period})" if top.period else ""
    ax.set_title(f"{top.name}, P = {P}{tv}\nspectral gap 1 - |lambda_2| = {top.spectral_gap():.4f}", fontsize=10)
    ax.set_aspect("equal")
    ax.set_axis_off()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_runs(run_dirs, out_dir) -> list[Path]:
    """All figures for these runs into ``out_dir``; returns the files written.
    A directory without ``summary.json`` stands for the runs in its
    subdirectories (see :func:`find_runs`)."""
    runs = [load_run(d) for d in find_runs(run_dirs)]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = [out / "accuracy.png", out / "breakdown.png", out / "trace.png"]
    metric = "bleu" if any("bleu" in (r["summary"]["history"] or [{}])[0] for r in runs) else "test_accuracy"
    plot_accuracy(runs, files[0], metric)
    plot_breakdown(runs, files[1])
    plot_trace(runs, files[2])
    if plot_traffic(runs, out / "traffic.png", metric):
        files.append(out / "traffic.png")
    return files
