"""Figures with matplotlib (Agg backend: works without a screen).

``python -m minips plot RUN_DIR [RUN_DIR ...] --out DIR`` draws, for runs
written by ``train`` or ``compare``: test accuracy per epoch and against wall
time (from the end of the warm-up steps, so a process's first run does not
carry the kernels' compile), the stacked per-step timing breakdown, the
per-step training loss and the per-step columns each algorithm declares for
figures (e.g. a predictor's diagnostics) from ``trace.csv``, the consensus distance of runs whose ranks hold different
weights, and (when the runs counted their traffic) accuracy against MiB sent.

What a reader can rely on in every figure: each algorithm has one colour
(:func:`algo_color`, derived from its name), each run its own
line style and marker (so identical curves, e.g. sync and overlap-sync, both
show), and each run a label that says what differs between the runs
(:func:`run_labels`: the algorithm and its options, the network, the ranks,
... or the folder name), with runs on an emulated network marked as such.

The package, one job per module (every public name is importable from
``minips.plots``): ``style`` (colours, line styles, markers, the Agg backend
and :func:`~minips.plots.style.save`), ``runs`` (the figures of finished runs
and :func:`plot_runs`), ``methods`` (methods compared: curves and the
accuracy-against-traffic scatter), ``labels`` (where the scatter's names go),
``topology`` (a gossip graph) and ``layout`` (the tests' check of a figure's
texts, :func:`layout_problems`).
"""
from __future__ import annotations

from ..rundir import find_runs, load_run
from .layout import layout_problems
from .methods import (WALL_AFTER_WARMUP, WALL_WITH_WARMUP, plot_accuracy_vs_traffic, plot_method_curves, run_methods,
                      wall_clock)
from .runs import (consensus_points, other_seconds, plot_accuracy, plot_breakdown, plot_consensus, plot_runs,
                   plot_trace, run_labels, trace_columns)
from .style import PHASE_COLORS, algo_color, pyplot, run_styles
from .topology import plot_topology, topology_layout

__all__ = ["load_run", "find_runs", "plot_accuracy", "plot_breakdown", "plot_trace", "plot_consensus", "plot_runs",
           "plot_method_curves", "plot_accuracy_vs_traffic", "run_methods", "algo_color", "run_labels",
           "run_styles", "PHASE_COLORS", "layout_problems", "pyplot", "plot_topology", "topology_layout",
           "other_seconds", "trace_columns", "consensus_points", "wall_clock", "WALL_AFTER_WARMUP",
           "WALL_WITH_WARMUP"]
