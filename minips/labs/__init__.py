"""Labs: tools that study the algorithms from above, never used by a training run.
``projection`` (step time and weak-scaling efficiency at many nodes from a
measured one-node step, through each algorithm's own cost model), ``staleness``
(stale-by-k SGD in one process, any predictor), ``averaging`` (gossip averaging
methods on a vectorised cluster or under MPI; its figures in
``averaging_figures``, the ``gossip-lab`` subcommand in ``averaging_cli``). The
package sits above ``distributed`` and ``averaging``, whose code it drives;
nothing below it imports it (tests/test_structure.py)."""
