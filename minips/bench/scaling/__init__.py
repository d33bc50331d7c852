"""``python -m minips bench scaling``: weak scaling of the training step, measured
at small P and projected to many nodes (this package holds its public names).

Run it as one plain process (not under mpiexec): for each rank count P and
algorithm it launches::

    mpiexec -n P [BINDING] python -m minips train --algo A --max-steps N --epochs 1 \\
        --batch-size B --quiet --no-trace --out DIR/P{P}-{A}-r{i}

(weak scaling: the per-rank batch B is fixed, the global batch is P B), reads
each run's ``summary.json`` and reports, per algorithm and P: the steady-state
step time of the slowest rank (median over ``--repeats`` runs), images/s, the
timing breakdown, and the weak-scaling efficiency ``E(P) = T(1) / T(P)``.

Threads: each rank gets ``--threads`` Numba/BLAS threads (default 1), so P
ranks use P cores and T(1) is one rank on one core; E(P) then measures what
communication (and sharing the node's memory bandwidth) costs, not thread
scaling. Up to the number of cores the ranks are bound to cores; beyond it
they are oversubscribed (fine for correctness, meaningless for timing).

Then the model (:mod:`minips.labs.projection`):

- *predicted vs measured*: the step time at each measured P predicted from the
  P = 1 compute profile plus (a) the blocking allreduce time the Trainer
  measured at that P (``comm_alone_s``), and (b) an alpha-beta fit from
  ``bench comm --json`` (``--comm-json``), with the interference phi of
  assumption 4 (``--interference``; ``auto`` = from the comm JSON's ``poll``
  overlap measurement, else 1: a node with no spare core);
- *projection*: E(P) for P = 1..``--project-max`` nodes on each interconnect of
  ``--project-networks``, with the P = 1 profile measured here as the per-node
  compute and ideal offloaded overlap (phi = ``--project-interference``,
  default 0), next to the seed paper's 93.4 % (64 nodes) and 90.5 % (128).

Prints the tables and writes them to ``OUT/scaling.txt`` (beside ``--json``,
with its name and ``.txt``, when one is given), everything to
``--json`` (default ``OUT/scaling.json``), and ``--plot`` (measured breakdown
and E(P); projection). A "-" in a table is explained under it. ``--from-json`` redoes the model and plots
from an earlier JSON without running anything.

The package, one job per module: :mod:`.measure` (the runs), :mod:`.model` (predicted vs
measured, projections), :mod:`.tables` (text), :mod:`.figures` (PNG), :mod:`.cli` (the command).
"""
from __future__ import annotations

from .cli import add_arguments, run
from .figures import plot_projection, plot_scaling
from .measure import ScalingError, measure, parse_algos, parse_ranks
from .model import model_check, node_projection, project_also, projection, reported_points

__all__ = ["ScalingError", "parse_ranks", "parse_algos", "measure", "model_check", "projection", "node_projection",
           "project_also", "reported_points", "plot_scaling", "plot_projection", "run", "add_arguments"]
