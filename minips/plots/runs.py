"""The figures of finished runs (``python -m minips plot``, and ``compare``
at its end): the metric per epoch and against wall time, the per-step timing
breakdown, the per-step trace columns, the consensus distance, and
:func:`plot_runs`, which draws them all plus the method figures of
:mod:`minips.plots.methods` for the runs' traffic."""
from __future__ import annotations

from pathlib import Path

from ..rundir import find_runs, load_run
from ..timing import phase_names
from . import style
from .methods import plot_accuracy_vs_traffic, plot_method_curves, run_methods, wall_clock
from .style import PHASE_COLORS, algo_color, pyplot, run_styles


def _network_name(summary: dict) -> str:
    """"emulated 1 GbE" for an emulated network, "real network" otherwise."""
    if not summary.get("network_emulated"):
        return "real network"
    net = str(summary.get("network") or "?")
    return "emulated " + net.split(" (")[0]


# What may differ between runs, in the order a label names it: (summary key -> text).
_DIFFERS = (("algo_label", lambda s, v: v), ("network", lambda s, v: v), ("world_size", lambda s, v: f"P={v}"),
            ("model", lambda s, v: str(v)), ("data", lambda s, v: str(v)), ("lr", lambda s, v: f"lr {v:g}"),
            ("batch_size_per_rank", lambda s, v: f"batch {v}"), ("seed", lambda s, v: f"seed {v}"),
            ("partition", lambda s, v: f"partition {v}"),
            ("epochs_planned", lambda s, v: f"{v} epoch" + ("" if v == 1 else "s")))


def run_labels(runs, labels=None) -> list[str]:
    """A label per run that says what differs between ``runs`` (dicts of
    :func:`load_run`, with ``dir``): the algorithm with its options (or the
    run's ``--label``), the network, the number of ranks, and model, data, lr,
    batch, seed, partition or epochs when those differ; every run on an
    emulated network says so. Runs that are still alike get their folder
    name added. ``labels`` (``plot --labels``) replaces them all.

    Raises:
        ValueError: ``labels`` of another length than ``runs``.
    """
    if labels is not None:
        if len(labels) != len(runs):
            raise ValueError(f"--labels gives {len(labels)} label(s) for {len(runs)} run(s): give one per run, "
                             "comma-separated, in the order the runs are listed")
        return list(labels)

    def value(r, key):
        s = r["summary"]
        if key == "algo_label":
            return s.get("label") or s.get("algo_spec") or s.get("algo") or r["dir"].name
        if key == "network":
            return _network_name(s)
        if key == "partition":
            p = s.get("partition")
            return p.get("spec") if isinstance(p, dict) else p
        return s.get(key)

    parts = [[] for _ in runs]
    for key, fmt in _DIFFERS:
        vals = [value(r, key) for r in runs]
        differs = len({repr(v) for v in vals}) > 1
        for i, (r, v) in enumerate(zip(runs, vals)):
            if v is None:
                continue
            if key == "algo_label" or differs or (key == "network" and r["summary"].get("network_emulated")):
                parts[i].append(fmt(r["summary"], v))
    out = [", ".join(p) for p in parts]
    counts = {x: out.count(x) for x in out}
    out = [f"{x} [{r['dir'].name}]" if counts[x] > 1 else x for x, r in zip(out, runs)]
    if len(set(out)) < len(out):  # same folder names in different places: the parent too
        out = [f"{x.rsplit(' [', 1)[0]} [{r['dir'].parent.name}/{r['dir'].name}]" if out.count(x) > 1 else x
               for x, r in zip(out, runs)]
    return out


def _style(runs, r) -> dict:
    """Colour (the algorithm's), line style and marker (the run's) of run ``r``."""
    i = next(j for j, x in enumerate(runs) if x is r)
    return {"color": algo_color(r["summary"].get("algo", "")), **run_styles(len(runs))[i]}


def _legend_beside(ax, fig, **kw) -> None:
    """A legend to the right of ``ax``, outside it: it never covers a bar or a line."""
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, **kw)


def plot_accuracy(runs, path, metric: str = "test_accuracy") -> None:
    """Two panels: ``metric`` against epoch (integer ticks) and against
    wall-clock seconds, counted from the end of the warm-up steps when every
    run's are known (:func:`wall_clock`): the first run of a process also
    compiles the kernels, which would shift it right by tens of seconds. When
    every run was on virtual ranks (whose wall clock is not a cluster's), the
    second panel is against the projected time (steps x the cost model's step
    time) instead."""
    from matplotlib.ticker import MaxNLocator

    from ..report import evaluation_curve
    plt = pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4))
    virtual = bool(runs) and all(r["summary"].get("virtual") for r in runs)
    curves = {r["name"]: evaluation_curve(r["summary"], r.get("trace"), metric) for r in runs}
    if virtual:
        net = next((r["summary"].get("projected_network") for r in runs), None)
        key, wall_label = "projected_time_s", f"projected time on {net} (s): steps x the cost model's step time"
    else:
        key, wall_label = wall_clock(list(curves.values()))
    for r in runs:
        c = curves[r["name"]]
        if not c:  # no complete epoch, or not this metric
            continue
        st = _style(runs, r)
        a.plot([p["epoch"] for p in c], [p[metric] for p in c], label=r["name"], **st)
        if all(p.get(key) is not None for p in c):  # (a virtual run of an algorithm without a cost model: none)
            b.plot([p[key] for p in c], [p[metric] for p in c], label=r["name"], **st)
    a.set_xlabel("epoch")
    # min_n_ticks=1: with one epoch the view spans less than one unit, and the default
    # (2 integer ticks or none) falls back to ticks such as 0.975, 1.005
    a.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
    b.set_xlabel(wall_label, fontsize=8)
    a.set_title(f"{metric.replace('_', ' ')} per epoch")
    b.set_title(f"{metric.replace('_', ' ')} against " + ("projected time (VIRTUAL ranks)" if virtual else "wall time"))
    for ax in (a, b):
        ax.set_ylabel(metric.replace("_", " "))
        ax.grid(alpha=0.3)
    if a.lines:
        _legend_beside(b, fig)
    else:  # runs stopped (--max-steps) before their first complete epoch
        for ax in (a, b):
            ax.text(0.5, 0.5, "no complete epoch", ha="center", transform=ax.transAxes)
    fig.tight_layout()
    style.save(fig, path)


def other_seconds(summary: dict) -> float:
    """Seconds per step outside every timed phase (data slicing, logging): the
    summary's ``time_other_s``, or for older summaries the step time minus
    the phases (0 when the step time is missing)."""
    if summary.get("time_other_s") is not None:
        return float(summary["time_other_s"])
    step = summary.get("step_time_s")
    return max(0.0, step - sum(summary["time_breakdown"].values())) if step else 0.0


def plot_breakdown(runs, path) -> None:
    """Stacked horizontal bars: mean milliseconds per step in each phase and
    "other" (the rest of the step), one bar per run (top to bottom in the
    order given, its label beside it); the legend beside the bars."""
    import textwrap
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(10, 1.5 + 0.55 * len(runs)))
    y = list(range(len(runs)))[::-1]  # the first run on top
    left = [0.0] * len(runs)
    extra = iter(("#DD8452", "#937860", "#DA8BC3", "#8C8C8C", "#9EDAE5", "#FF9896"))
    for ph in phase_names([r["summary"]["time_breakdown"] for r in runs]):  # every phase any run timed
        vals = [1e3 * r["summary"]["time_breakdown"].get(ph, 0.0) for r in runs]
        if not any(vals) and ph not in PHASE_COLORS:
            continue
        ax.barh(y, vals, left=left, label=ph, color=PHASE_COLORS.get(ph) or next(extra, None))
        left = [b + v for b, v in zip(left, vals)]
    other = [1e3 * other_seconds(r["summary"]) for r in runs]
    if any(other):
        ax.barh(y, other, left=left, label="other (data, logging)", color=PHASE_COLORS["other"])
    ax.set_yticks(y, [textwrap.fill(r["name"], 40) for r in runs], fontsize=8)
    ax.set_xlabel("ms per step (mean over steps and ranks)")
    virtual = any(r["summary"].get("virtual") for r in runs)
    ax.set_title("timing breakdown per step" + (" (VIRTUAL ranks: threads of one process, not cluster times)"
                                                if virtual else ""))
    ax.grid(axis="x", alpha=0.3)
    _legend_beside(ax, fig)
    fig.tight_layout()
    style.save(fig, path)


def trace_columns(run) -> dict:
    """The trace.csv columns run ``run`` (as :func:`load_run` reads it) has
    figures for: name -> (panel title, axis label), as its algorithm declares
    them (``Algorithm.trace_columns``): summary.json's ``trace_columns``, or
    for runs made before it recorded them, the registered algorithm of its
    ``algo_spec`` asked now (none when that spec no longer resolves)."""
    s = run["summary"]
    if "trace_columns" in s:
        return {k: (v["title"], v["label"]) for k, v in (s["trace_columns"] or {}).items()}
    from ..distributed.algorithms import resolve
    try:
        spec = resolve(s.get("algo_spec") or s.get("algo") or "")
    except ValueError:
        return {}
    return spec.cls.trace_columns(spec.options)


def plot_trace(runs, path, smooth: int = 20) -> None:
    """Per-step training loss (moving average) and one panel per trace column
    the runs' algorithms declare (:func:`trace_columns`, e.g. a predictor's
    diagnostics) that some run logged."""
    import numpy as np
    plt = pyplot()
    declared: dict = {}
    for r in runs:
        for k, v in trace_columns(r).items():
            if r["trace"] and any(row.get(k) not in (None, "") for row in r["trace"]):
                declared.setdefault(k, v)
    panels = [("loss", ("training loss", f"training loss ({smooth}-step mean)")), *declared.items()]
    n_rows = -(-sum(1 for r in runs if r["trace"]) // 3)
    fig, axes = plt.subplots(1, len(panels), figsize=(9 + 4 * (len(panels) - 1), 4.2 + 0.2 * n_rows),
                             squeeze=False)
    axes = axes[0]

    def series(r, key):
        xs = [int(row["step"]) for row in r["trace"] if row.get(key) not in (None, "")]
        ys = [float(row[key]) for row in r["trace"] if row.get(key) not in (None, "")]
        if len(ys) >= smooth:
            ys = np.convolve(ys, np.ones(smooth) / smooth, mode="valid").tolist()
            xs = xs[smooth - 1:]
        return xs, ys

    for i, r in enumerate(runs):
        if not r["trace"]:
            continue
        st = _style(runs, r)
        for ax, (key, _) in zip(axes, panels):
            xs, ys = series(r, key)
            if ys:  # markers staggered per run, so overlapping curves stay apart
                every = max(1, len(xs) // 8)
                ax.plot(xs, ys, label=r["name"], markevery=(i * every // max(1, len(runs)), every), **st)
    for ax, (_, (title, ylabel)) in zip(axes, panels):
        ax.set_title(title)
        ax.set_ylabel(ylabel)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if ax.lines:
            pass
        elif ax is axes[0]:
            ax.text(0.5, 0.5, "no trace.csv", ha="center", transform=ax.transAxes)
        else:
            ax.text(0.5, 0.5, "no run logged this", ha="center", transform=ax.transAxes)
    # one legend for the panels (a run has the same colour, line and marker in each), below them
    handles = {}
    for ax in axes:
        for line in ax.lines:
            handles.setdefault(line.get_label(), line)
    rows = -(-len(handles) // 3)
    bottom = (0.25 + 0.2 * rows) / fig.get_figheight() if handles else 0.0  # inches -> figure fraction
    fig.tight_layout(rect=(0, bottom, 1, 1))
    if handles:
        fig.legend(list(handles.values()), list(handles), loc="lower center", bbox_to_anchor=(0.5, 0.0),
                   ncol=min(3, len(handles)), fontsize=8, frameon=False)
    style.save(fig, path)


def consensus_points(run) -> tuple[list[tuple[int, float]], tuple[int, float] | None]:
    """What :func:`plot_consensus` draws for one run: the consensus distance
    during training, ``(step, value)`` for the trace rows that logged it (every
    ``--consensus-every`` steps, 0-based step of the step just taken; zeros,
    right after an average, left out: a log axis cannot show them), and the
    end-of-run value of summary.json (after the last step, the value
    ``compare.md`` reports) at step ``steps - 1``; None when the run has none."""
    rows = [(int(t["step"]), float(t["consensus_distance"])) for t in run.get("trace") or []
            if t.get("consensus_distance") not in (None, "") and float(t["consensus_distance"]) > 0]
    s = run["summary"]
    end = s.get("consensus_distance")
    last = int(s.get("steps") or (rows[-1][0] + 1 if rows else 0)) - 1
    return rows, (None if end is None else (max(last, 0), float(end)))


def plot_consensus(runs, path) -> bool:
    """How far the ranks' models drift apart, for the runs whose ranks hold
    different weights: the consensus distance ``(1/P) sum_i ||w_i - mean w||^2``
    against the step, filled markers during training (trace.csv, every
    ``--consensus-every`` steps) and a hollow star at the end of training
    (summary.json; the value compare.md reports; at 0, e.g. right after a
    final average, it is named in the note under the axis instead), joined to
    the run's line. Returns False (and writes nothing) when every run kept its
    ranks identical, or every value is 0 (runs shorter than ``--consensus-every``
    that end on an average): there is nothing to draw."""
    shown = [(r, *consensus_points(r)) for r in runs]
    shown = [(r, rows, end) for r, rows, end in shown if rows or end is not None]
    if not any(rows or end[1] > 0 for _, rows, end in shown):  # nothing but zeros: nothing a log axis can show
        return False
    plt = pyplot()
    looks = {r["name"]: _style(runs, r) for r in runs}  # the algorithm's colour, the run's marker
    legend_rows = -(-len(shown) // 3)
    fig, ax = plt.subplots(figsize=(8.5, 4.4 + 0.2 * legend_rows))
    zero_at_end = []
    for r, rows, end in shown:
        st = looks[r["name"]]
        pts = rows + ([end] if end is not None and end[1] > 0 else [])
        if pts:
            ax.plot([s for s, _ in pts], [c for _, c in pts], ms=3, label=r["name"], **st)
        if end is not None and end[1] > 0:
            ax.plot([end[0]], [end[1]], marker="*", ms=11, mfc="white", mec=st["color"], ls="none")
        elif end is not None:
            zero_at_end.append(r["name"])
    ax.set_yscale("log")
    notes = ["0 during training (right after an average) is left out"]
    if zero_at_end:
        notes.append("0 at the end (not on the log axis): " + ", ".join(zero_at_end))
    ax.set_xlabel("step (0-based: the consensus after that step)\n" + "; ".join(notes), fontsize=8)
    ax.set_ylabel("consensus distance (1/P) sum ||w_i - mean w||^2", fontsize=8)
    ax.set_title("how far the ranks' models drift apart\nfilled: every --consensus-every steps during "
                 "training; hollow star: at the end of training (compare.md's value)", fontsize=9)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout(rect=(0, (0.25 + 0.2 * legend_rows) / fig.get_figheight(), 1, 1))
    handles = {h.get_label(): h for h in ax.lines if not h.get_label().startswith("_")}
    fig.legend(list(handles.values()), list(handles), loc="lower center", bbox_to_anchor=(0.5, 0.0),
               ncol=min(3, len(handles)), fontsize=8, frameon=False)
    style.save(fig, path)
    return True


def plot_runs(run_dirs, out_dir, labels=None) -> list[Path]:
    """All figures for these runs into ``out_dir``; returns the files written.
    A directory without ``summary.json`` stands for the runs in its
    subdirectories (see :func:`find_runs`). Runs are labelled by
    :func:`run_labels` (``labels``: one per run, to choose them yourself).

    Files: ``accuracy.png`` (the metric per epoch and against wall time),
    ``breakdown.png``, ``trace.png``; ``consensus.png`` (the consensus
    distance during and at the end of training) when some run's ranks hold
    different weights; and when the runs counted their traffic
    ``accuracy-bytes.png`` (the metric against cumulative MiB sent per rank)
    and ``accuracy-traffic.png`` (final metric against MiB per step, one
    labelled point per run).

    Raises:
        ValueError: ``labels`` of another length than the runs found.
    """
    dirs = find_runs(run_dirs)
    runs = [{**load_run(d), "dir": Path(d)} for d in dirs]
    for r, name in zip(runs, run_labels(runs, labels)):
        r["name"] = name
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = [out / "accuracy.png", out / "breakdown.png", out / "trace.png"]
    metric = "bleu" if any("bleu" in (r["summary"]["history"] or [{}])[0] for r in runs) else "test_accuracy"
    plot_accuracy(runs, files[0], metric)
    plot_breakdown(runs, files[1])
    plot_trace(runs, files[2])
    if plot_consensus(runs, out / "consensus.png"):
        files.append(out / "consensus.png")
    methods = run_methods(runs, metric)
    sizes = sorted({r["summary"].get("world_size") for r in runs if r["summary"].get("world_size")})
    title = "P=" + ",".join(map(str, sizes)) if sizes else "runs"
    if plot_method_curves([(title, methods)], out / "accuracy-bytes.png", "mib_sent", metric):
        files.append(out / "accuracy-bytes.png")
    if plot_accuracy_vs_traffic([(title, methods)], out / "accuracy-traffic.png", metric):
        files.append(out / "accuracy-traffic.png")
    return files
