"""Figures that compare methods (runs of ``compare``, or a study's means over
seeds): the metric against wall time or MiB sent, one line per method
(:func:`plot_method_curves`), and the final metric against MiB per step, one
labelled point per method (:func:`plot_accuracy_vs_traffic`; the labels are
placed by :func:`minips.plots.labels.label_points`)."""
from __future__ import annotations

from . import style
from .labels import label_points
from .style import algo_color, method_styles, pyplot


def run_methods(runs, metric: str = "test_accuracy") -> list[dict]:
    """The runs (dicts of :func:`load_run` with ``name``) as the "methods" that
    :func:`plot_method_curves` and :func:`plot_accuracy_vs_traffic` draw: one
    per run, its evaluation curve (:func:`minips.report.evaluation_curve`),
    final ``metric`` and MiB sent per rank per step."""
    from ..report import evaluation_curve
    out = []
    for r in runs:
        s = r["summary"]
        b = s.get("bytes_sent_per_step")
        out.append({"name": r["name"], "algo": s.get("algo", ""), "curve": evaluation_curve(s, r["trace"], metric),
                    "final": s.get(metric), "final_ci": None, "mib_per_step": None if b is None else b / 2**20})
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
    styles = method_styles([next(m for _, ms in panels for m in ms if m["name"] == n) for n in names])
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
    style.save(fig, path)
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
    styles = method_styles([next(m for _, ms in panels for m in ms if m["name"] == n) for n in names])
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
        label_points(ax, [(m["mib_per_step"], m["final"]) for m in pts], [m["name"] for m in pts],
                      [algo_color(m["algo"]) for m in pts], bars=[m.get("final_ci") or 0.0 for m in pts])
    style.save(fig, path)
    return True
