"""``python -m minips bench study GRID.toml --out DIR``: a convergence study (this package holds
its public names).

Runs ``python -m minips train`` under ``mpiexec -n P`` for every point of a
grid (ranks x learning-rate setting x algorithm x seed), one run after the
other, and aggregates the final test metric (accuracy, or BLEU for the
captioner) into tables and figures. It is a plain driver process: do not start
it under mpiexec.

The grid is a TOML file (see ``configs/study-*.toml``)::

    ranks = [2, 4, 8]
    seeds = [0, 1, 2]
    algos = ["sync", "overlap-sync", "pseudo-sync:last:1", "pseudo-sync:adaptive:2@rho99"]
    timeout_s = 1800            # per run
    metric = "test_accuracy"    # or "bleu"; "val_accuracy" / "val_bleu" with val-fraction in [train]
    target_accuracy = 0.85      # optional: seconds to the first evaluation at or above it
    within_points = 0.5         # optional: the target "within 0.5 points of the baseline" (met / missed / unresolved)
    contrasts = ["pseudo-sync:local:1 - pseudo-sync:adaptive:1"]   # optional: more pairs, by seed
    report_metric = "test_accuracy"  # optional: reported next to a val_* metric (default: its test twin)
    chance = 0.1                # optional: an accuracy's chance level (default 0.1 for accuracies, none for BLEU)
    networks = ["1gbe", "10gbe", "ib-edr"]  # optional, virtual runs and a val_* metric: time to accuracy per network
    phis = [0.0, 1.0]           # optional: the cost model's compute interference(s) to read them at (default [0.0])
    target_below_baseline = 0.5 # optional: that target, in points below the baseline's final val metric (default 0.5)

    [train]                     # passed as explicit flags to every run
    model = "convnet"
    data = "fashion-mnist-mini"
    epochs = 3
    batch-size = 32
    ...

    [lr.fixed]                  # one table per learning-rate setting
    lr = 0.05
    scale-lr = false
    warmup-epochs = 0.0

    [variants.rho99]            # options of the algorithm's options table (its Options.EXTRA:
                                # pseudo-sync's predictor options), selected by "@rho99" in algos
    rho = 0.99

    [env]                       # environment of every run (threads per rank)
    NUMBA_NUM_THREADS = "1"

With ``virtual = true`` in the grid (or ``--virtual-ranks P,...`` on the
command line, which also replaces the grid's ranks) every run is
``python -m minips train --virtual-ranks P ...``: P ranks as threads of one
process instead of ``mpiexec -n P`` (:mod:`minips.distributed.comm.virtual`),
in ``OUT/runs/P{P}-virtual/``. Their metrics and traffic are the MPI runs';
their measured times are not a cluster's, so the report marks them VIRTUAL
and times to the target use the cost model's projected step time.

``algos`` entries are algorithm specs as in ``compare``
(``NAME[:key=value]...[@LABEL]``, or the short ``NAME:PREDICTOR:K``); an
``@NAME`` that names a ``[variants.NAME]`` table selects those options (they
go to the algorithm's options table, ``Options.EXTRA``, e.g. pseudo-sync's
predictor options), any other ``@NAME`` is just the run's label.

Every run writes ``OUT/runs/P{P}/{lr}/{label}/seed{s}/`` (the train outputs);
a run whose ``summary.json`` exists is skipped, so an interrupted study
continues where it stopped. A run that stops with a non-finite loss is
recorded as *diverged* (it is a result, not an error). A run that finishes
with its ``metric`` below ``chance + 0.01`` (0.11 for 10 classes) *collapsed*
(:func:`mark_collapsed`): a failure like a divergence, counted (``chance k/n``,
``[k at chance]``) and left out of every mean, interval and paired comparison.
While a file
``OUT/PAUSE`` exists the driver waits between runs (to take timing
measurements on a quiet machine). At the end (and with ``--report-only``)
it writes, named after the grid file ``G.toml``: ``OUT/G.json`` (every run),
``OUT/G.md`` (mean, 95 % t interval and min-max over seeds, and each entry
against the registry's baseline algorithm paired by seed when the grid has
it) and
``OUT/G-<lr>.png`` (metric against P per algorithm), and the families
report: in ``G.md`` a table per learning-rate setting with one row per
algorithm entry (its family, and per P the test metric, MiB sent per rank per
step and its ratio to the baseline's, seconds to ``target_accuracy`` and the
consensus distance; :func:`families_report`), in ``G.json`` the same per
cell (``cells``), and ``OUT/G-<lr>-time.png``, ``-bytes.png``,
``-traffic.png`` (the test metric against wall seconds, against cumulative
MiB sent, and its final value against MiB per step, labelled; drawn by
:mod:`minips.plots` as ``compare``'s are). Several grids
may share one ``OUT`` (e.g. a tuning grid reusing the main grid's runs), one
after the other: a study that runs holds ``OUT/run.lock`` until it ends, and
a second study into the same ``OUT`` is refused before it starts a run
(``--report-only``, which only reads the runs, is not). Every file it writes
is written atomically; a full disk ends it with one line naming the folder
and the fix (``G.json`` and ``G.md`` together or neither, no temporary file).

Statistics (:mod:`minips.stats`): every cell is reported as its mean and
95 % t interval over seeds; every entry is paired by seed with the baseline
entry (the registry's baseline, sync), and the report says **better** /
**worse** / **no difference shown** from the 95 % t interval of the per-seed
differences. A run that diverged or finished at chance (``chance`` + 0.01, 0.11 for
ten classes: collapsed) is a failure: counted, never averaged or paired
(:func:`.aggregate.mark_collapsed`).
Grid keys ``within_points = X`` (a target "within X points of the baseline":
met / missed / unresolved, with the seeds that would resolve it) and
``contrasts = ["A - B", ...]`` (other pairs); flags ``--within``,
``--contrast``, and ``--add-records OLD.json`` (count the runs an earlier
study recorded, for seeds whose folders were not kept).

Choosing on a validation split: with ``val-fraction`` in ``[train]`` and
``metric = "val_accuracy"`` (or ``"val_bleu"``), the report's first tables
are the validation metric (what chooses defaults), then the same tables for
``report_metric`` (the test metric, reported, never used to choose), and a
line per (lr, P) saying which algorithm the validation metric chose and its
test value.

Time to accuracy per network (:mod:`.timeaxis`): with ``networks`` (and
virtual runs, ``metric = "val_accuracy"``; ``eval-every`` in ``[train]`` for
more than one point per epoch) every run is read on each network's and each
``phis`` entry's time axis (steps x the algorithm's cost-model step time
there): ``G.md`` gains per (lr, P, network) a table of the seconds to the
target (the baseline's final validation metric minus
``target_below_baseline`` points; "k/n reached", an interval only when every
seed reached it) and the validation metric at the budget (the baseline's
whole run), ``G.json`` the cells (``time_to_accuracy``), and
``OUT/G-<lr>-tta-<network>.png`` the curves (mean over seeds, min-max band).

The package, one job per module: :mod:`.grid` (the grid file), :mod:`.runner` (one run),
:mod:`.aggregate` (over seeds, paired), :mod:`.timeaxis` (time to accuracy per network),
:mod:`.report` (markdown), :mod:`.figures` (PNG),
:mod:`.cli` (the command).
"""
from __future__ import annotations

from .aggregate import aggregate, contrasts, family_cells, mark_collapsed, paired_comparisons
from .cli import add_arguments, run
from .figures import plot_families, plot_study, plot_time_to_accuracy
from .grid import Grid, RunSpec, StudyError, expand, load_grid
from .report import families_report, markdown_report, paired_report
from .runner import train_command
from .timeaxis import time_cells, time_report

__all__ = ["Grid", "RunSpec", "StudyError", "load_grid", "expand", "train_command", "aggregate", "mark_collapsed",
           "paired_comparisons", "contrasts", "markdown_report", "paired_report", "family_cells", "families_report",
           "plot_families", "plot_study", "plot_time_to_accuracy", "time_cells", "time_report", "run",
           "add_arguments"]
