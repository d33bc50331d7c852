"""``python -m minips bench {kernels,lstm,comm,scaling,study,train,virtual}``: each benchmark prints a
table and can write JSON. Benchmarks register themselves in :data:`BENCHES`
(name -> (add_arguments(parser), run(args) -> int, help)).
"""
from __future__ import annotations

import importlib

from ..cli import subcommand

BENCHES: dict = {}
_MODULES = ("minips.bench.kernels", "minips.bench.lstm", "minips.bench.comm", "minips.bench.scaling",
            "minips.bench.study", "minips.bench.train", "minips.bench.virtual")


def register_bench(name: str, help: str):
    """Decorator for ``add_arguments(parser)``; the parser must ``set_defaults(func=run)``."""
    def deco(add_args):
        BENCHES[name] = (add_args, help)
        return add_args
    return deco


@subcommand("bench", help="benchmarks: kernels, lstm, comm, scaling, study, train, virtual (table + JSON)")
def add_bench_arguments(p):
    for mod in _MODULES:
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as e:
            if e.name != mod:
                raise
    sub = p.add_subparsers(dest="bench", required=True, metavar="{" + ",".join(BENCHES) + "}")
    for name, (add_args, help_) in BENCHES.items():
        add_args(sub.add_parser(name, help=help_))
