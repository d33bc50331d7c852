"""Figures with matplotlib (Agg backend: works without a screen).

``python -m minips plot RUN_DIR [RUN_DIR ...] --out DIR`` draws, for runs
written by ``train`` or ``compare``: test accuracy per epoch and against wall
time (from the end of the warm-up steps, so a process's first run does not
carry the kernels' compile), the stacked per-step timing breakdown, the
per-step training loss and the per-step columns each algorithm declares for
figures (e.g. a predictor's diagnostics) from ``trace.csv``, the consensus distance of runs whose ranks hold different
weights, and (when the runs counted their traffic) accuracy against MiB sent.

What a reader can rely on in every figure: each algorithm has one colour
(:func:`algo_color`, fixed by its place in the registry), each run its own
line style and marker (so identical curves, e.g. sync and overlap-sync, both
show), and each run a label that says what differs between the runs
(:func:`run_labels`: the algorithm and its options, the network, the ranks,
... or the folder name), with runs on an emulated network marked as such.
"""
from __future__ import annotations

from pathlib import Path

from .rundir import find_runs, load_run
from .timing import phase_names

__all__ = ["load_run", "find_runs", "plot_accuracy", "plot_breakdown", "plot_trace", "plot_consensus", "plot_runs",
           "plot_method_curves", "plot_accuracy_vs_traffic", "run_methods", "algo_color", "run_labels",
           "run_styles", "PHASE_COLORS", "layout_problems", "pyplot"]

#: one colour per timing phase, in every breakdown figure ("other": the step's time outside every phase)
PHASE_COLORS = {"forward": "#4C72B0", "backward": "#55A868", "post": "#8172B2", "wait": "#C44E52",
                "predict": "#CCB974", "update": "#64B5CD", "other": "#BBBBBB"}

_LINESTYLES = ("-", "--", ":", "-.")
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
#: lightness and saturation levels an algorithm's colour may take (HLS; dark
#: enough to read on white)
_LIGHTNESS, _SATURATION = (0.30, 0.42, 0.54), (0.65, 0.85)


def algo_color(algo: str) -> str:
    """The colour of algorithm ``algo`` (its registry name, e.g. ``pseudo-sync``)
    in every figure, derived from the name alone: the hue from a SHA-256 of the
    name, the lightness and saturation from two more of its bytes (HLS). Adding
    or reordering rows of the algorithms' table recolours nothing; two names
    may still get close colours, so figures also vary line style and marker
    (:func:`run_styles`). Returns ``"#rrggbb"``."""
    import colorsys
    import hashlib
    d = hashlib.sha256(algo.encode()).digest()
    hue = int.from_bytes(d[:4], "big") / 2**32
    r, g, b = colorsys.hls_to_rgb(hue, _LIGHTNESS[d[4] % len(_LIGHTNESS)], _SATURATION[d[5] % len(_SATURATION)])
    return "#" + "".join(f"{round(255 * c):02x}" for c in (r, g, b))


def run_styles(n: int) -> list[dict]:
    """Line style and marker of the i-th of ``n`` runs: all different, so two runs
    with the same curve still show as two (the markers are also staggered
    with ``markevery`` where curves are long)."""
    return [{"linestyle": _LINESTYLES[i % len(_LINESTYLES)], "marker": _MARKERS[i % len(_MARKERS)]}
            for i in range(n)]


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


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend (files only: no display needed)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _save(fig, path) -> None:
    """Write ``fig`` to ``path`` and close it (tests replace this to inspect the figure)."""
    fig.savefig(path, dpi=120, bbox_inches="tight")
    pyplot().close(fig)


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

    from .report import evaluation_curve
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
    _save(fig, path)


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
    _save(fig, path)


def trace_columns(run) -> dict:
    """The trace.csv columns run ``run`` (as :func:`load_run` reads it) has
    figures for: name -> (panel title, axis label), as its algorithm declares
    them (``Algorithm.trace_columns``): summary.json's ``trace_columns``, or
    for runs made before it recorded them, the registered algorithm of its
    ``algo_spec`` asked now (none when that spec no longer resolves)."""
    s = run["summary"]
    if "trace_columns" in s:
        return {k: (v["title"], v["label"]) for k, v in (s["trace_columns"] or {}).items()}
    from .distributed.algorithms import resolve
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
    _save(fig, path)


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
    style = {r["name"]: _style(runs, r) for r in runs}  # the algorithm's colour, the run's marker
    legend_rows = -(-len(shown) // 3)
    fig, ax = plt.subplots(figsize=(8.5, 4.4 + 0.2 * legend_rows))
    zero_at_end = []
    for r, rows, end in shown:
        st = style[r["name"]]
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
    _save(fig, path)
    return True


def topology_layout(top):
    """Where :func:`plot_topology` draws each rank, and which edges wrap around.

    Returns:
        (xy, wrap): ``xy`` (P, 2) float64, the graph's own layout when it has
        one (the torus's grid, the random geometric graph's points), else the
        ranks on a circle; ``wrap`` the undirected edges (i, j), i < j, that
        close a torus's rows or columns (drawn as stubs leaving the grid, not
        as lines across it).
    """
    import numpy as np
    P = top.P
    if top.layout is not None:
        xy = np.asarray(top.layout, float)
    else:
        ang = 2 * np.pi * np.arange(P) / P
        xy = np.stack([np.cos(ang), np.sin(ang)], axis=1)
    wrap = []
    if top.name == "torus" and top.layout is not None:
        wrap = [(j, i) for i in range(P) for j in top.in_neighbors(i)
                if j < i and np.abs(xy[i] - xy[j]).max() > 1.5]
    return xy, wrap


def plot_topology(top, path) -> None:
    """A gossip graph: ranks in the graph's own layout (the torus on its grid,
    the random geometric graph at its points; the others on a circle), an edge
    per nonzero off-diagonal weight (an arrow when the graph is directed), the
    spectral gap in the title."""
    import numpy as np
    plt = pyplot()
    P = top.P
    xy, wrap = topology_layout(top)
    wrapped = set(wrap)
    fig, ax = plt.subplots(figsize=(5, 5))
    for i in range(P):
        for j in top.in_neighbors(i):  # j sends to i
            if top.directed:
                ax.annotate("", xy=xy[i], xytext=xy[j], arrowprops={"arrowstyle": "->", "color": "#4C72B0",
                                                                       "shrinkA": 9, "shrinkB": 9})
            elif (j, i) in wrapped:  # a stub out of the grid at both ends, towards the other end's side
                out = -np.sign(np.where(np.abs(xy[i] - xy[j]) > 1.5, xy[i] - xy[j], 0.0))
                for a, s in ((j, 1.0), (i, -1.0)):
                    ax.plot(*np.stack([xy[a], xy[a] + 0.45 * s * out]).T, color="#4C72B0",
                            lw=0.8 + 2 * top.W[i, j], alpha=0.8, ls=(0, (2, 1.5)))
            elif j < i:
                ax.plot(*xy[[i, j]].T, color="#4C72B0", lw=0.8 + 2 * top.W[i, j], alpha=0.8)
    if top.name == "random-geometric" and top.layout is not None:  # the unit square the points are drawn from
        ax.plot([0, 1, 1, 0, 0], [0, 0, 1, 1, 0], color="grey", lw=0.6, ls=":")
    big = P <= 32
    ax.scatter(*xy.T, s=260 if big else 110, color="white", edgecolor="black", zorder=3)
    for i in range(P):
        ax.text(*xy[i], str(i), ha="center", va="center", fontsize=8 if big else 6, zorder=4)
    tv = f", time-varying (step 0 of {top.period})" if top.period else ""
    where = {"torus": "; dashed stubs: the edges that wrap around",
             "random-geometric": "; ranks at their points in the unit square"}.get(top.name, "")
    where = where if top.layout is not None else ""
    ax.set_title(f"{top.name}, P = {P}{tv}\nspectral gap 1 - |lambda_2| = {top.spectral_gap():.4f}{where}",
                 fontsize=9)
    ax.set_aspect("equal")
    ax.set_axis_off()
    fig.tight_layout()
    _save(fig, path)


def run_methods(runs, metric: str = "test_accuracy") -> list[dict]:
    """The runs (dicts of :func:`load_run` with ``name``) as the "methods" that
    :func:`plot_method_curves` and :func:`plot_accuracy_vs_traffic` draw: one
    per run, its evaluation curve (:func:`minips.report.evaluation_curve`),
    final ``metric`` and MiB sent per rank per step."""
    from .report import evaluation_curve
    out = []
    for r in runs:
        s = r["summary"]
        b = s.get("bytes_sent_per_step")
        out.append({"name": r["name"], "algo": s.get("algo", ""), "curve": evaluation_curve(s, r["trace"], metric),
                    "final": s.get(metric), "final_ci": None, "mib_per_step": None if b is None else b / 2**20})
    return out


def _method_styles(methods) -> list[dict]:
    """Colour (the algorithm's), line style and marker of each method: the
    marker by its place, the line style by how many methods before it share
    its colour (the palette repeats after 20 algorithms, and one algorithm may
    appear with several option sets), so no two methods look alike."""
    out, seen = [], {}
    for i, m in enumerate(methods):
        color = algo_color(m["algo"])
        k = seen[color] = seen.get(color, -1) + 1
        out.append({"color": color, "linestyle": _LINESTYLES[k % len(_LINESTYLES)],
                    "marker": _MARKERS[(i + k // len(_LINESTYLES)) % len(_MARKERS)]})
    return out


_CURVE_AXES = {"wall_time_s": ("wall time (s)", "against wall time"),
               "mib_sent": ("MiB sent per rank (cumulative, mean over ranks)", "against MiB sent"),
               "projected_time_s": ("projected time (s): steps x the cost model's step time",
                                    "against projected time (VIRTUAL ranks)")}
#: the wall-time axis when every run's warm-up seconds are known (minips.report.warmup_seconds)
WALL_AFTER_WARMUP = ("wall time after the warm-up steps (s; their JIT compile, paid by a process's first run, "
                     "left out)")
WALL_WITH_WARMUP = "wall time (s; includes the first steps, where a process's first run compiles the kernels)"


def wall_clock(curves) -> tuple[str, str]:
    """Which clock a figure against wall time uses for these evaluation
    curves (lists of points of :func:`minips.report.evaluation_curve`): the
    key ``wall_after_warmup_s`` and its axis label when every point has it, so
    that no run carries the kernels' one-time compile; else ``wall_time_s``,
    labelled as including it."""
    pts = [p for c in curves for p in c if p.get("wall_time_s") is not None]
    if pts and all(p.get("wall_after_warmup_s") is not None for p in pts):
        return "wall_after_warmup_s", WALL_AFTER_WARMUP
    return "wall_time_s", WALL_WITH_WARMUP


def plot_method_curves(panels, path, x: str = "wall_time_s", metric: str = "test_accuracy",
                       note: str = "") -> bool:
    """``metric`` at each evaluation against ``x`` (``"wall_time_s"``: seconds
    since the end of the warm-up steps when every run's are known, else since
    the start, as :func:`wall_clock` says; ``"mib_sent"``: cumulative MiB each rank sent), one line
    per method, one panel per ``(title, methods)`` of ``panels`` (methods as
    :func:`run_methods` gives them; a study passes means over seeds), one
    legend below the panels. ``note``: a line under the panel titles (e.g.
    that oversubscribed ranks were not timed). Returns False (and writes
    nothing) when no method has a point to draw (against MiB: when no method
    sent any bytes, as with one process).

    Raises:
        ValueError: ``x`` is not ``"wall_time_s"``, ``"mib_sent"`` or
            ``"projected_time_s"`` (runs on virtual ranks: steps x the cost
            model's step time, :func:`minips.report.project`).
    """
    if x not in _CURVE_AXES:
        raise ValueError(f"x must be one of {', '.join(_CURVE_AXES)}, got {x!r}")
    # a method that sent nothing (one process) has no line against MiB: it would sit on a degenerate axis
    drawable = [[m for m in ms if any(p.get(x) is not None and (x != "mib_sent" or p[x] > 0) for p in m["curve"])]
                for _, ms in panels]
    if not any(drawable):
        return False
    key, wall_label = (x, None) if x != "wall_time_s" else wall_clock([m["curve"] for ms in drawable for m in ms])
    plt = pyplot()
    names = list(dict.fromkeys(m["name"] for _, ms in panels for m in ms))
    legend_rows = -(-len(names) // 3)
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels) + 0.5, 4.4 + 0.2 * legend_rows),
                             squeeze=False)
    handles = {}
    styles = _method_styles([next(m for _, ms in panels for m in ms if m["name"] == n) for n in names])
    styles = dict(zip(names, styles))  # a method looks the same in every panel
    for ax, (title, _), shown in zip(axes[0], panels, drawable):
        for m in shown:
            pts = [p for p in m["curve"] if p.get(key) is not None]
            line, = ax.plot([p[key] for p in pts], [p[metric] for p in pts], ms=4, label=m["name"],
                            **styles[m["name"]])
            handles.setdefault(m["name"], line)
        label, what = _CURVE_AXES[x]
        label = wall_label or label
        if x == "mib_sent" and shown and all(p[x] > 0 for m in shown for p in m["curve"] if p.get(x) is not None):
            from matplotlib.ticker import FuncFormatter
            ax.set_xscale("log")  # compressed and local methods send 10-1000x less than the others
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            label += " (log scale)"
        ax.set_xlabel(label)
        ax.set_ylabel(metric.replace("_", " "))
        ax.set_title(f"{title}\n{metric.replace('_', ' ')} {what}" + (f"\n{note}" if note else ""), fontsize=10)
        ax.grid(alpha=0.3)
        if not shown:
            ax.text(0.5, 0.5, "no run counted this", ha="center", transform=ax.transAxes)
    fig.tight_layout(rect=(0, (0.25 + 0.2 * legend_rows) / fig.get_figheight(), 1, 1))
    fig.legend(list(handles.values()), list(handles), loc="lower center", bbox_to_anchor=(0.5, 0.0),
               ncol=min(3, len(handles)), fontsize=8, frameon=False)
    _save(fig, path)
    return True


def plot_accuracy_vs_traffic(panels, path, metric: str = "test_accuracy", note: str = "") -> bool:
    """Final ``metric`` against MiB sent per rank per step (log scale), one
    labelled point per method (bars: the 95 % t interval over seeds when a
    method has ``final_ci``), one panel per ``(title, methods)`` of
    ``panels``. Labels are placed where they overlap no other label or point
    (a thin line leads to a label set away from its point). Methods that sent
    nothing cannot sit on a log axis: they are named under the panel.
    Returns False (and writes nothing) when no method has both numbers."""
    plt = pyplot()
    from matplotlib.ticker import FuncFormatter, LogLocator
    pts_of = [[m for m in ms if m.get("final") is not None and (m.get("mib_per_step") or 0) > 0]
              for _, ms in panels]
    if not any(pts_of):
        return False
    most = max(len(p) for p in pts_of)
    fig, axes = plt.subplots(1, len(panels), figsize=(8.0 * len(panels), 5.0 + 0.1 * most), squeeze=False)
    names = list(dict.fromkeys(m["name"] for _, ms in panels for m in ms))
    styles = _method_styles([next(m for _, ms in panels for m in ms if m["name"] == n) for n in names])
    styles = dict(zip(names, styles))
    for ax, (title, methods), pts in zip(axes[0], panels, pts_of):
        for m in pts:
            st = styles[m["name"]]
            ax.errorbar([m["mib_per_step"]], [m["final"]], yerr=None if not m.get("final_ci") else [m["final_ci"]],
                        fmt=st["marker"], color=st["color"], ms=6, capsize=2, elinewidth=0.8)
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(plt.NullFormatter())
        ax.margins(x=0.25, y=0.25)
        ax.set_xlabel("MiB sent per rank per step (log scale)")
        ax.set_ylabel(f"final {metric.replace('_', ' ')}")
        ax.set_title(f"{title}\nfinal {metric.replace('_', ' ')} against traffic" + (f"\n{note}" if note else ""),
                     fontsize=10)
        ax.grid(alpha=0.3, which="both")
        left_out = [m["name"] for m in methods if m not in pts and m.get("final") is not None]
        if left_out:
            ax.text(0.0, -0.16, "sent nothing (not on the log axis): " + ", ".join(left_out), fontsize=7,
                    transform=ax.transAxes, va="top", wrap=True)
    fig.tight_layout()
    for ax, pts in zip(axes[0], pts_of):
        _label_points(ax, [(m["mib_per_step"], m["final"]) for m in pts], [m["name"] for m in pts],
                      [algo_color(m["algo"]) for m in pts], bars=[m.get("final_ci") or 0.0 for m in pts])
    _save(fig, path)
    return True


def _label_points(ax, xy, names, colors, fontsize: float = 7.0, bars=None) -> None:
    """Put ``names[i]`` next to data point ``xy[i]`` where it overlaps no label
    placed before it, no point, no leader line and stays inside the axes:
    candidates on rings of growing radius around the point and in rows beside
    it (in pixels, after the layout is fixed), the nearest free one taken, the
    most crowded points first; a label away from its point gets a thin leader
    line in the point's colour, which may cross no label or point either.
    When no candidate is free the one with the least overlap is taken.
    ``bars``: the half-height of each point's error bar in data units (the
    bar is kept clear like the point)."""
    import numpy as np
    fig = ax.figure
    fig.canvas.draw()
    rend = fig.canvas.get_renderer()
    to_pt = 72.0 / fig.dpi
    box = ax.get_window_extent(rend)
    disp = ax.transData.transform(np.asarray(xy, dtype=float))
    sizes = []
    for n in names:
        t = ax.text(0.5, 0.5, n, fontsize=fontsize, transform=ax.transAxes)  # (data 0 is off a log axis)
        bb = t.get_window_extent(rend)
        sizes.append((bb.width, bb.height))
        t.remove()
    marker_r = 6.0
    points = np.column_stack([disp - marker_r, disp + marker_r])  # (n, 4): x0, y0, x1, y1
    if bars is not None:  # the error bars: as tall as they are drawn
        xy_arr = np.asarray(xy, dtype=float)
        lo = ax.transData.transform(xy_arr - np.column_stack([np.zeros(len(xy)), bars]))[:, 1]
        hi = ax.transData.transform(xy_arr + np.column_stack([np.zeros(len(xy)), bars]))[:, 1]
        points[:, 1] = np.minimum(points[:, 1], lo)
        points[:, 3] = np.maximum(points[:, 3], hi)
    labels = np.zeros((0, 4))  # placed label boxes
    leaders = np.zeros((0, 4))  # placed leader segments: x0, y0, x1, y1

    def area(b, r):  # (C, 4) boxes x (K, 4) boxes -> (C,) summed overlap areas
        w = np.minimum(b[:, None, 2], r[None, :, 2]) - np.maximum(b[:, None, 0], r[None, :, 0])
        h = np.minimum(b[:, None, 3], r[None, :, 3]) - np.maximum(b[:, None, 1], r[None, :, 1])
        return (np.clip(w, 0, None) * np.clip(h, 0, None)).sum(axis=1)

    rings = [(r * np.cos(a), r * np.sin(a)) for r in (9, 14, 20, 28, 38, 50, 64, 80, 100, 125, 155, 190, 230)
             for a in np.deg2rad(np.arange(0, 360, 15.0))]
    crowd = [int(np.sum(np.hypot(*(disp - disp[i]).T) < 60)) for i in range(len(disp))]
    for i in sorted(range(len(disp)), key=lambda i: -crowd[i]):
        (x, y), (w, h) = disp[i], sizes[i]
        # on rings around the point, and stacked in rows beside it (labels are wide and short)
        rows = [(sx * d, k * (h + 1.5)) for k in range(-16, 17) for d in (10, 22, 40, 65, 95, 130, 170)
                for sx in (1, -1)]
        c = np.asarray(rings + rows)
        dx, dy = c[:, 0], c[:, 1]
        # the label's near side faces the point
        x0 = x + dx - np.where(dx < -1, w, np.where(np.abs(dx) <= 1, w / 2, 0.0))
        y0 = y + dy - np.where(dy < -1, h, np.where(np.abs(dy) <= 1, h / 2, 0.0))
        bb = np.column_stack([x0 - 1, y0 - 1, x0 + w + 1, y0 + h + 1])
        r = np.hypot(dx, dy)
        seg = np.column_stack([np.full_like(dx, x), np.full_like(dy, y), x + dx, y + dy])
        others = np.delete(points, i, axis=0)
        # worst: over another label; then a leader line through a label or a point; then over a point
        cost = 1e4 * area(bb, labels) + 30.0 * area(bb, points) + r
        cost += 3e3 * _segments_through_boxes(leaders, bb).sum(axis=0)
        far = r > 12
        cost += far * 3e3 * (_segments_through_boxes(seg, labels).sum(axis=1)
                             + _segments_through_boxes(seg, others).sum(axis=1))
        cost += far * 300.0 * _segments_cross(seg, leaders).sum(axis=1)
        outside = (bb[:, 0] < box.x0) | (bb[:, 1] < box.y0) | (bb[:, 2] > box.x1) | (bb[:, 3] > box.y1)
        cost[outside] = np.inf  # off the axes: over the tick labels
        k = int(np.argmin(cost))
        if not np.isfinite(cost[k]):  # no room inside the axes at all: beside the point
            k = int(np.argmin(r + 1e3 * (np.abs(dy) > 1) + 1e3 * (dx < 0)))
        dx, dy = float(dx[k]), float(dy[k])
        labels = np.vstack([labels, bb[k]])
        far = float(r[k]) > 12
        if far:
            leaders = np.vstack([leaders, seg[k]])
        ha = "right" if dx < -1 else ("center" if abs(dx) <= 1 else "left")
        va = "top" if dy < -1 else ("center" if abs(dy) <= 1 else "bottom")
        ax.annotate(names[i], xy=xy[i], xytext=(dx * to_pt, dy * to_pt), textcoords="offset points", ha=ha,
                    va=va, fontsize=fontsize, color="black")
        if far:  # the leader line: an annotation of its own, so the label's extent is the text's alone
            ax.annotate("", xy=xy[i], xytext=(dx * to_pt, dy * to_pt), textcoords="offset points",
                        arrowprops={"arrowstyle": "-", "color": colors[i], "lw": 0.7, "shrinkA": 1, "shrinkB": 4})


def _segments_through_boxes(seg, boxes):
    """``(S, K)``: does segment s (x0, y0, x1, y1) pass through the inside of box
    k (x0, y0, x1, y1)? Liang-Barsky clipping, vectorized."""
    import numpy as np
    sx0, sy0 = seg[:, None, 0], seg[:, None, 1]
    dx, dy = seg[:, None, 2] - sx0, seg[:, None, 3] - sy0
    t0 = np.zeros((len(seg), len(boxes)))
    t1 = np.ones((len(seg), len(boxes)))
    ok = np.ones((len(seg), len(boxes)), dtype=bool)
    for p, q in ((-dx, sx0 - boxes[None, :, 0]), (dx, boxes[None, :, 2] - sx0),
                 (-dy, sy0 - boxes[None, :, 1]), (dy, boxes[None, :, 3] - sy0)):
        p, q = np.broadcast_to(p, t0.shape), np.broadcast_to(q, t0.shape)
        zero = p == 0
        ok &= ~(zero & (q < 0))
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.where(zero, 0.0, q / np.where(zero, 1.0, p))
        t0 = np.where(~zero & (p < 0), np.maximum(t0, t), t0)
        t1 = np.where(~zero & (p > 0), np.minimum(t1, t), t1)
    return ok & (t0 < t1)


def _segments_cross(a, b):
    """``(A, B)``: do segments ``a[i]`` and ``b[j]`` (x0, y0, x1, y1) cross (a
    shared end point does not count)?"""

    def side(p, q, r):
        return (q[..., 0] - p[..., 0]) * (r[..., 1] - p[..., 1]) - (q[..., 1] - p[..., 1]) * (r[..., 0] - p[..., 0])
    a1, a2 = a[:, None, :2], a[:, None, 2:]
    b1, b2 = b[None, :, :2], b[None, :, 2:]
    return (side(b1, b2, a1) * side(b1, b2, a2) < 0) & (side(a1, a2, b1) * side(a1, a2, b2) < 0)


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


def layout_problems(fig) -> list[str]:
    """What a reader would stumble on in ``fig``, as matplotlib's renderer lays
    it out (one sentence each; empty when none): texts (titles, axis and tick
    labels, annotations, legend entries) that overlap each other, that run
    off the figure, or that lie over another panel's drawing; a legend over
    bars or boxes of its own panel; and a legend naming one entry twice.
    Used by the tests on every figure minips and the tutorials draw."""
    import numpy as np
    from matplotlib.collections import PolyCollection
    from matplotlib.patches import Rectangle
    fig.canvas.draw()
    rend = fig.canvas.get_renderer()
    W, H = fig.bbox.width, fig.bbox.height
    problems, texts = [], []  # texts: (what, bbox, owner axes or None)

    def add(t, what, owner):
        if t is None or not t.get_visible() or not t.get_text().strip():
            return
        texts.append((f"{what} {t.get_text()!r}", t.get_window_extent(rend), owner))

    def ticks(ax, axis, name):
        lo, hi = sorted(axis.get_view_interval())
        for tick in axis.get_major_ticks():
            if lo - 1e-9 * (hi - lo) <= tick.get_loc() <= hi + 1e-9 * (hi - lo):
                for lab in (tick.label1, tick.label2):
                    add(lab, f"{name} tick label", ax)

    if fig._suptitle is not None:
        add(fig._suptitle, "suptitle", None)
    legends = [(lg, None) for lg in fig.legends]
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        for t, what in ((ax.title, "title"), (ax._left_title, "title"), (ax._right_title, "title"),
                        (ax.xaxis.label, "x label"), (ax.yaxis.label, "y label")):
            if ax.axison or what == "title":
                add(t, what, ax)
        if ax.axison:
            ticks(ax, ax.xaxis, "x")
            ticks(ax, ax.yaxis, "y")
        for t in ax.texts:
            add(t, "text", ax)
        if ax.get_legend() is not None:
            legends.append((ax.get_legend(), ax))
    for lg, owner in legends:
        names = [t.get_text() for t in lg.get_texts()]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            problems.append(f"legend names {', '.join(map(repr, dup))} more than once")
        for t in lg.get_texts():
            texts.append((f"legend entry {t.get_text()!r}", t.get_window_extent(rend), owner or "figure legend"))
        if owner is not None:  # over the panel's own bars or boxes?
            box = lg.get_window_extent(rend)
            shapes = [p.get_window_extent(rend) for p in owner.patches if isinstance(p, Rectangle)
                      and p.get_width() and p.get_height()]
            for c in owner.collections:
                if isinstance(c, PolyCollection):
                    shapes += [path.get_extents(c.get_transform()) for path in c.get_paths()]
            if any(box.overlaps(s) and s.width > 0 and s.height > 0 for s in shapes):
                problems.append(f"the legend of panel {owner.get_title()!r} covers its bars")
    for what, bb, _ in texts:
        if bb.x0 < -1 or bb.y0 < -1 or bb.x1 > W + 1 or bb.y1 > H + 1:
            problems.append(f"{what} runs off the figure")
    shrink = 1.0  # touching is fine; overlapping by more than a pixel is not

    def hit(a, b):
        return (min(a.x1, b.x1) - max(a.x0, b.x0) > shrink) and (min(a.y1, b.y1) - max(a.y0, b.y0) > shrink)
    for i in range(len(texts)):
        for j in range(i + 1, len(texts)):
            if hit(texts[i][1], texts[j][1]):
                problems.append(f"{texts[i][0]} overlaps {texts[j][0]}")
    drawn = [ax for ax in fig.axes if ax.get_visible() and (ax.images or ax.lines or ax.patches or ax.collections)]
    for what, bb, owner in texts:
        for ax in drawn:
            if ax is not owner and hit(bb, ax.get_window_extent(rend)) and not np.isclose(bb.width, 0):
                problems.append(f"{what} lies over another panel ({ax.get_title()!r})")
    return problems
