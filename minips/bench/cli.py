"""``python -m minips bench {kernels,lstm,comm,scaling,study,train,virtual}``: each benchmark prints a
table and can write JSON.

:data:`BENCHES` is the one table of benchmarks: a new benchmark is a module (or a package) with
``add_arguments(parser)`` (which must ``set_defaults(func=run)``) and one row here.
"""
from __future__ import annotations

from . import comm, kernels, lstm, scaling, study, train, virtual

__all__ = ["BENCHES", "add_arguments"]

#: name -> (add_arguments(parser), help); the order is that of ``bench --help``
BENCHES: dict = {
    "kernels": (kernels.add_arguments, "Numba kernels vs NumPy twins vs PyTorch CPU (table + JSON)"),
    "lstm": (lstm.add_arguments, "LSTM forward and forward+backward: Numba kernel vs NumPy twin vs torch"),
    "comm": (comm.add_arguments, "allreduce latency/bandwidth, overlap per progress mode, alpha-beta fit"),
    "scaling": (scaling.add_arguments, "weak scaling of the training step under mpiexec; projection to many nodes"),
    "study": (study.add_arguments, "convergence study: a grid of train runs under mpiexec; accuracy tables"),
    "train": (train.add_arguments, "training steps/s of minips vs the same network in PyTorch (table + JSON)"),
    "virtual": (virtual.add_arguments,
                "cost of virtual ranks: time per sample vs plain train, peak memory (table + JSON)"),
}


def add_arguments(p):
    """The ``bench`` subcommand: one sub-parser per row of :data:`BENCHES`."""
    sub = p.add_subparsers(dest="bench", required=True, metavar="{" + ",".join(BENCHES) + "}")
    for name, (add_args, help_) in BENCHES.items():
        add_args(sub.add_parser(name, help=help_))
