"""Command line: ``python -m minips {train,compare,algorithms,topology,bench,data,plot,gossip-lab}``.

:data:`SUBCOMMANDS` is the one table of subcommands: name -> (a function adding
the subcommand's flags, which sets ``func``, the function that runs it; its
help). The ``bench`` subcommand has its own table of benchmarks
(:data:`minips.bench.cli.BENCHES`). A module that a row names never imports
this module back. Under ``mpiexec``, an exception on any rank prints its
message and aborts the whole job (``MPI_Abort``) so no rank hangs.

Long because one job: the command line. Every subcommand's flags sit beside the one
dispatcher that turns any rank's exception into a one-line message (and a job abort);
the work each subcommand does lives in its own module.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import pickle
import sys
from pathlib import Path

from . import end_startup_sigint_deferral
from .labs import averaging_cli as gossip_lab
from .bench import cli as bench_cli
from .options import finite_float

__all__ = ["main", "build_parser", "add_train_arguments", "config_from_args", "SUBCOMMANDS"]


def _bool_flag(p, name, help):
    p.add_argument(f"--{name}", dest=name.replace("-", "_"), action=argparse.BooleanOptionalAction,
                   default=None, help=help)


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``train`` (also used by ``compare``). Defaults are None so
    that a config file's values survive unless a flag is given."""
    from .config import TrainConfig
    from .distributed.algorithms import ALGORITHMS, DEFAULT, example_spec
    from .distributed.algorithms.option_flags import OPTION_FLAGS
    d = TrainConfig()
    p.add_argument("--config", help="TOML file of options (keys = the long flag names); flags override it")
    p.add_argument("--model", help=f"mlp, convnet or captioner (default {d.model})")
    p.add_argument("--data", help=f"fashion-mnist-mini, fashion-mnist, moving-fmnist-captions, or an .h5 path "
                                  f"(default {d.data})")
    p.add_argument("--epochs", type=int, help=f"passes over the training data (default {d.epochs})")
    p.add_argument("--batch-size", type=int, help=f"samples per step per rank (default {d.batch_size})")
    p.add_argument("--lr", type=float, help=f"base learning rate (default {d.lr})")
    p.add_argument("--momentum", type=float, help=f"heavy-ball momentum (default {d.momentum})")
    _bool_flag(p, "nesterov", "Nesterov momentum (default on; --no-nesterov for heavy ball)")
    p.add_argument("--weight-decay", type=float, help=f"L2 weight decay (default {d.weight_decay})")
    p.add_argument("--clip-norm", type=float, metavar="C",
                   help="clip every update direction to global L2 norm C (over all parameters, as "
                        "torch.nn.utils.clip_grad_norm_; before weight decay and momentum; default 0: off)")
    p.add_argument("--schedule", choices=["constant", "step", "cosine"], help="learning-rate schedule")
    p.add_argument("--warmup-epochs", type=float, help="linear warm-up length in epochs")
    _bool_flag(p, "scale-lr", "multiply lr by the number of ranks (linear scaling rule)")
    p.add_argument("--seed", type=int, help=f"seed of initialisation and data order (default {d.seed})")
    p.add_argument("--out", help=f"output directory (default {d.out})")
    p.add_argument("--algo", help=f"algorithm spec NAME[:key=value]...[@LABEL], e.g. {example_spec()}; NAME is "
                                  f"one of {', '.join(ALGORITHMS)} (default {d.algo or DEFAULT}; "
                                  "python -m minips algorithms lists each one's options)")
    for name, flag in OPTION_FLAGS.items():  # the older per-option flags (a table option: TOML only)
        if flag.type != "dict":
            p.add_argument(f"--{name.replace('_', '-')}", dest=name, type=flag.python_type, help=flag.help)
    p.add_argument("--partition", help="how the training set is split over ranks: iid (default), by-class:N "
                                       "(N classes per rank) or dirichlet:ALPHA (label proportions ~ Dir(ALPHA))")
    p.add_argument("--val-fraction", type=float, help="hold out this share of the training set (stratified, "
                                                      "the same samples in every run) and report validation "
                                                      "accuracy/loss each epoch (default 0: none)")
    p.add_argument("--eval-every", type=int, metavar="N",
                   help="also evaluate on the validation split every N steps (needs --val-fraction; a row of "
                        "curve.csv each time, outside the timed steps; default 0: only at each epoch's end)")
    p.add_argument("--consensus-every", type=int, help="when ranks hold different weights: log the consensus "
                                                       f"distance every N steps (default {d.consensus_every}; "
                                                       "0 = only at evaluations)")
    _bool_flag(p, "eval-rank0", "when ranks hold different weights: also evaluate rank 0's own model "
                                "(the averaged model is always evaluated)")
    p.add_argument("--network", help="emulate an interconnect: 1gbe, 10gbe, 25gbe, ib-fdr, ib-edr, ib-hdr, "
                                     "or alpha=SECONDS,beta=SECONDS_PER_BYTE")
    p.add_argument("--progress", choices=["none", "poll", "thread"], help="how nonblocking MPI requests "
                   f"progress (default {d.progress})")
    p.add_argument("--allreduce", choices=["flat", "hierarchical", "auto"],
                   help="how allreduce runs: flat (one MPI_Allreduce over all ranks), hierarchical (reduce inside "
                        "each node in shared memory, allreduce among one leader per node, broadcast back) or auto "
                        "(hierarchical with more than one node and more than one rank per node; default "
                        f"{d.allreduce})")
    p.add_argument("--ranks-per-node", type=int, metavar="N",
                   help="treat ranks 0..N-1 as node 0, N..2N-1 as node 1, ... (one machine standing in for several "
                        "nodes; the emulated --network then charges only traffic between nodes); default: the "
                        "machine's nodes, or one rank per node under --network")
    p.add_argument("--virtual-ranks", type=int, metavar="P",
                   help="run P ranks as threads of this one process (no mpiexec), each running the same step and "
                        "algorithm as an MPI rank, with the same partition, initial weights and data order; step "
                        "times are then not cluster times (outputs say VIRTUAL; see docs/distributed.md)")
    p.add_argument("--check-replicas", type=int, help="compare weight hashes across ranks every N steps")
    p.add_argument("--checkpoint-every", type=int, help="write a checkpoint every N steps (0 = off)")
    p.add_argument("--resume", help="checkpoint file to resume from (the run folder's files are rewritten)")
    _bool_flag(p, "overwrite", "replace the run already in --out (its metrics, summary, trace, checkpoint and "
                               "figures are removed first); without it a folder holding a run is refused")
    p.add_argument("--max-steps", type=int, help="stop after N steps (0 = run all epochs)")
    p.add_argument("--eval-batch-size", type=int, help=f"samples per forward pass when evaluating on the test set "
                                                       f"(memory only: metrics do not depend on it; default "
                                                       f"{d.eval_batch_size})")
    p.add_argument("--label", help="name of the run in tables and figures (default: the algorithm)")
    _bool_flag(p, "quiet", "no progress bar or per-epoch lines")
    _bool_flag(p, "trace", "write the per-step trace.csv (default on)")
    p.add_argument("--reference-kernels", action="store_true", default=None,
                   help="run the readable NumPy twins (kernels/reference.py) instead of the Numba kernels, for "
                        "the layers and the loss: an edit there then changes the run (slower; same as "
                        "MINIPS_REFERENCE_KERNELS=1). The gradient predictors have one path, in their own files, "
                        "with or without this flag")


def config_from_args(args):
    """Merge defaults < ``--config`` file < explicit flags into a TrainConfig.

    Raises:
        ConfigError: bad config file or values.
    """
    from .config import TrainConfig, config_fields, load_config
    values = load_config(args.config) if getattr(args, "config", None) else {}
    for name in config_fields():
        v = getattr(args, name, None)
        if v is not None:
            values[name] = v
    try:
        cfg = TrainConfig(**values)
    except TypeError as e:
        from .config import ConfigError
        raise ConfigError(str(e)) from None
    # TOML gives ints where floats are expected and the reverse: normalise.
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        if f.type == "float" and isinstance(v, int) and not isinstance(v, bool):
            setattr(cfg, f.name, float(v))
    cfg.validate()
    return cfg


def cmd_train(args) -> int:
    from .train import Trainer
    cfg = config_from_args(args)
    if cfg.virtual_ranks:
        return run_virtual(cfg, lambda: Trainer(cfg).run())
    Trainer(cfg).run()
    return 0


def add_compare_arguments(p):
    """The flags of ``compare``: those of ``train`` and its own."""
    from .distributed.algorithms import BASELINE, DEFAULT_ALGOS
    add_train_arguments(p)
    p.add_argument("--algos", required=True,
                   help="comma-separated algorithm specs NAME[:key=value]...[@LABEL], e.g. "
                        f"{','.join(DEFAULT_ALGOS)} (python -m minips algorithms lists them)")
    p.add_argument("--seeds", metavar="S,S,...",
                   help="run every algorithm once per seed (e.g. 0,1,2,3,4) and add the statistics over seeds to "
                        f"compare.md: mean and 95 %% CI per algorithm, each against {BASELINE} paired by seed "
                        "(better / worse / no difference shown), decided on the validation split with "
                        "--val-fraction, else on the test split (compare.md then says so); overrides --seed")
    p.add_argument("--within", type=finite_float, metavar="POINTS",
                   help=f"with --seeds: the target 'within POINTS of {BASELINE}' (accuracy points: 0.5 = 0.005; "
                        "BLEU points), reported as met / missed / unresolved")
    p.add_argument("--target-accuracy", type=finite_float, metavar="ACC",
                   help="also report each run's wall seconds until its first evaluation at or above this test "
                        "accuracy (BLEU for the captioner), e.g. 0.85")
    _bool_flag(p, "figures", "draw the comparison's figures into --out at the end (default on; --no-figures skips "
                             "them, and python -m minips plot OUT --out OUT draws them later)")
    p.set_defaults(func=cmd_compare)


def cmd_compare(args) -> int:
    """Several algorithms on one setup (:mod:`minips.compare`)."""
    from .compare import parse_algos, run_compare
    from .config import ConfigError
    # compare names its runs by --algos and starts each from scratch: these train
    # flags would be ignored, so they are refused
    for flag, why in (("algo", "list the algorithms in --algos"), ("label", "label an entry with SPEC@LABEL"),
                      ("resume", "resume one run with train --resume")):
        if getattr(args, flag, None) is not None:
            raise ConfigError(f"compare does not take --{flag}: {why}")
    target = args.target_accuracy
    if target is not None and not (0 < target <= 100):
        raise ConfigError(f"--target-accuracy {target}: give the test accuracy to reach, in (0, 1] "
                          "(or a BLEU score up to 100 for the captioner)")
    cfg = config_from_args(args)
    if target is not None and target > 1 and cfg.model != "captioner":  # accuracy is a fraction, BLEU 0..100
        raise ConfigError(f"--target-accuracy {target:g}: test accuracy is a fraction in (0, 1] "
                          f"(did you mean {target / 100:g}?); only the captioner's BLEU goes up to 100")
    seeds = None
    if args.seeds is not None:
        try:
            seeds = [int(x) for x in args.seeds.split(",") if x.strip()]
        except ValueError:
            raise ConfigError(f"--seeds {args.seeds}: give comma-separated integers, e.g. --seeds 0,1,2") from None
        if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
            raise ConfigError(f"--seeds {args.seeds}: give distinct non-negative integers, e.g. --seeds 0,1,2")
    if args.within is not None and not args.within > 0:
        raise ConfigError(f"--within {args.within}: give the largest acceptable gap to the baseline in points, "
                          "> 0 (e.g. 0.5 for half a point of accuracy)")
    if args.within is not None and (seeds is None or len(seeds) < 2):
        raise ConfigError("--within needs --seeds with two or more seeds (a target is judged on a confidence "
                          "interval over seeds)")
    algos = parse_algos(args.algos)
    figures = args.figures is not False
    if cfg.virtual_ranks:
        return run_virtual(cfg, lambda: run_compare(cfg, algos, cfg.out, target, seeds, args.within, figures))
    run_compare(cfg, algos, cfg.out, target, seeds, args.within, figures)
    return 0


#: what a rank reports in one line (``error: ...``) instead of a traceback
USER_ERRORS = (ValueError, FileNotFoundError, FileExistsError, FloatingPointError, RuntimeError, KeyError, EOFError,
               pickle.UnpicklingError)


def run_virtual(cfg, fn) -> int:
    """Run ``fn()`` on ``cfg.virtual_ranks`` virtual ranks (threads of this
    process); returns the exit status. Each rank handles an exception as a
    rank under mpiexec does in :func:`main`: it prints one line (or the
    traceback of an unexpected error) prefixed with its rank and aborts the
    job, so the status is the one ``mpiexec`` would return."""
    from .distributed.comm import abort_on_exception, get_comm, virtual

    def rank():
        comm = get_comm()
        try:
            return fn()
        except USER_ERRORS as e:
            msg = f"error: {_numba_cache_message(e) or e}"
            if comm.size > 1:
                comm.abort(msg)
            print(msg, file=sys.stderr)
            if os.environ.get("MINIPS_TRACEBACK"):
                raise
            raise SystemExit(2) from None
        except BaseException as e:  # noqa: BLE001 - as under mpiexec: end every rank
            if comm.size > 1:
                abort_on_exception(comm, e)
            raise

    try:
        virtual.run(cfg.virtual_ranks, rank, network=cfg.network, progress=cfg.progress, allreduce=cfg.allreduce,
                    ranks_per_node=cfg.ranks_per_node or None)
    except KeyboardInterrupt:  # Ctrl-C before the ranks' stop protocol was armed: the job was ended
        return 130
    return 0


def cmd_data(args) -> int:
    from .data import fashion_mnist
    if args.dataset == "fashion-mnist":
        counts = fashion_mnist.convert(args.src, args.out, args.train_subset, args.test_subset, args.seed)
        print(f"wrote {args.out}: " + ", ".join(f"{k} {v} images" for k, v in counts.items()))
        return 0
    if args.dataset == "moving-fmnist-captions":
        # Clips from the committed mini Fashion-MNIST; the subset flags count clips here.
        from .data import moving_fmnist
        n_train = args.train_subset or moving_fmnist.DEFAULT_TRAIN_CLIPS
        n_test = args.test_subset or moving_fmnist.DEFAULT_TEST_CLIPS
        ds = moving_fmnist.build_dataset("fashion-mnist-mini", n_train, n_test, seed=args.seed)
        moving_fmnist.write_h5(ds, args.out)
        print(f"wrote {args.out}: {n_train} train and {n_test} test clips of {ds.meta['frames']} frames, "
              f"{len(ds.vocab)}-token vocabulary; e.g. {ds.train_text[0]!r}")
        return 0
    raise SystemExit(f"unknown data set {args.dataset!r}")


def cmd_algorithms(args) -> int:
    """List every registered algorithm (text, or JSON with ``--json``)."""
    import json
    import textwrap

    from .distributed.algorithms import describe_algorithms
    rows = describe_algorithms()
    if args.json:
        print(json.dumps(rows, indent=2, default=str))
        return 0
    from .distributed.algorithms import example_spec
    print(f"Algorithm specs: NAME[:key=value]...[@LABEL], e.g. --algo {example_spec()}\n")
    for r in rows:
        ident = "ranks identical" if r["replicated"] else "ranks hold different weights"
        print(f"{r['name']}  [{r['family']}; {ident}]")
        print(textwrap.fill(r["summary"], 100, initial_indent="    ", subsequent_indent="    "))
        if r["positional"]:
            print(f"    short form: {r['name']}:" + ":".join(p.upper() for p in r["positional"]))
        for o in r["options"]:
            unit = f" {o['unit']}" if o["unit"] else ""
            default = o["default"] if o["default"] not in ({}, None) else "-"
            choices = f" (one of {', '.join(map(str, o['choices']))})" if o["choices"] else ""
            print(f"    {o['name']:<18} {o['type']:<6} default {default}{unit}  {o['help']}{choices}")
        for variant, opts in r["extra_options"].items():
            print(f"      {variant}: " + (", ".join(f"{k}={v}" for k, v in opts.items()) or "no options"))
        if not r["options"]:
            print("    (no options)")
        print(f"    paper: {r['paper'] or '-'}\n")
    return 0


def cmd_topology(args) -> int:
    """Print a topology's mixing matrix, degrees and spectral gap; draw it with --plot."""
    import numpy as np

    from .distributed.topology import make_topology
    opts = {k: v for k, v in (("seed", args.seed), ("radius", args.radius)) if v is not None}
    if opts and args.name != "random-geometric":
        raise ValueError(f"--seed and --radius are options of random-geometric, not of {args.name}")
    top = make_topology(args.name, args.n, **opts)
    d = top.describe()
    print(f"{top.name} on {top.P} rank(s): spectral gap 1 - |lambda_2| = {d['spectral_gap']:.4f}; degree "
          f"{d['max_degree']} (max), {d['mean_degree']:.2f} (mean); "
          + ("directed" if top.directed else "undirected, Metropolis-Hastings weights")
          + (f"; time-varying with period {top.period} (the matrix of step 0)" if top.period else ""))
    if top.P <= 16:
        with np.printoptions(precision=3, suppress=True, linewidth=160):
            print("mixing matrix W (x_i <- sum_j W_ij x_j):")
            print(top.W)
    if args.plot:
        from .plots import plot_topology
        plot_topology(top, args.plot)
        print(f"wrote {args.plot}")
    return 0


def cmd_plot(args) -> int:
    """Figures of finished runs (see :func:`minips.plots.plot_runs`)."""
    from .plots import plot_runs
    labels = [x.strip() for x in args.labels.split(",")] if args.labels else None
    for f in plot_runs(args.runs, args.out, labels):
        print(f"wrote {f}")
    return 0


class Parser(argparse.ArgumentParser):
    """argparse without abbreviations (``--epoch`` is not taken for ``--epochs``)
    and with a suggestion for a misspelt option: an unknown ``--flag`` is
    reported with the usage of the subcommand it was given to and the closest
    options it has (``--algorithm``: did you mean ``--algo``?)."""

    def __init__(self, *a, **k):
        k.setdefault("allow_abbrev", False)
        super().__init__(*a, **k)

    def error(self, message):
        import difflib
        import re
        parser = self
        m = re.match(r"unrecognized arguments: (.*)", message)
        if m:
            parser = self._chosen_subparser() or self
            unknown = [a.split("=", 1)[0] for a in m.group(1).split() if a.startswith("-")]
            options = [o for act in parser._actions for o in act.option_strings
                       if o.startswith("--") and o != "--help"]
            hints = []
            for u in unknown:
                close = difflib.get_close_matches(u, options, n=3, cutoff=0.6)
                if close:
                    hints.append(f"{u}: did you mean {' or '.join(close)}?")
            if hints:
                message += "\n" + "\n".join(hints)
            message += f"\n(all options: {parser.prog} --help)"
        text = parser.format_usage() + f"{parser.prog}: error: {message}"
        from .distributed.comm import fail_before_mpi, launched_by_mpi
        if launched_by_mpi():  # every rank parses the same arguments: say it once for the job
            raise SystemExit(fail_before_mpi(text, 2))
        parser.exit(2, text + "\n")

    def _chosen_subparser(self, argv=None):
        """The (innermost) subcommand's parser named in the arguments, or None."""
        argv = self._argv if argv is None else argv
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                for i, arg in enumerate(argv or []):
                    if arg in action.choices:
                        sub = action.choices[arg]
                        return sub._chosen_subparser(argv[i + 1:]) or sub
        return None

    _argv = None

    def parse_args(self, args=None, namespace=None):
        self._argv = list(sys.argv[1:] if args is None else args)
        return super().parse_args(args, namespace)


def _add_train(p):
    add_train_arguments(p)
    p.set_defaults(func=cmd_train)


def _add_algorithms(p):
    p.add_argument("--json", action="store_true", help="print JSON (for scripts)")
    p.set_defaults(func=cmd_algorithms)


def _add_topology(p):
    from .distributed.topology import TOPOLOGIES
    p.add_argument("name", choices=list(TOPOLOGIES))
    p.add_argument("-n", type=int, default=8, help="number of ranks (default 8)")
    p.add_argument("--seed", type=int, help="random-geometric: seed of the points (default 0)")
    p.add_argument("--radius", type=finite_float, help="random-geometric: link distance (default 1.5 sqrt(ln n / n))")
    p.add_argument("--plot", help="PNG file to draw the graph into")
    p.set_defaults(func=cmd_topology)


def _add_data(p):
    p.add_argument("dataset", choices=["fashion-mnist", "moving-fmnist-captions"])
    p.add_argument("--from", dest="src", default="/usr/share/datasets/fashion-mnist",
                   help="directory of the four IDX files (default: Debian's dataset-fashion-mnist)")
    p.add_argument("--out", required=True, help="the .h5 file to write")
    p.add_argument("--train-subset", type=int, help="keep a stratified subset of N training images")
    p.add_argument("--test-subset", type=int, help="keep a stratified subset of N test images")
    p.add_argument("--seed", type=int, default=0, help="seed of the subset choice")
    p.set_defaults(func=cmd_data)


def _add_plot(p):
    p.add_argument("runs", nargs="+", help="--out directories of train/compare runs (a compare directory "
                   "stands for all its runs)")
    p.add_argument("--out", required=True, help="directory for the PNG files")
    p.add_argument("--labels", help="comma-separated names of the runs, one per run in order (default: what "
                   "differs between them: algorithm and options, network, ranks, ...; else the folder name)")
    p.set_defaults(func=cmd_plot)


#: The table of subcommands: name -> (add_arguments(parser), which must
#: ``parser.set_defaults(func=run)`` with ``run(args) -> exit status``; help).
#: The order is that of ``--help``. A new subcommand is a row here.
SUBCOMMANDS: dict = {
    "train": (_add_train, "train one model with one algorithm (under mpiexec for >1 rank)"),
    "compare": (add_compare_arguments, "run several algorithms on the same setup; table + figures"),
    "algorithms": (_add_algorithms, "list every algorithm: family, options with defaults and units, paper"),
    "topology": (_add_topology, "a gossip graph: its mixing matrix, degrees and spectral gap (--plot draws it)"),
    "bench": (bench_cli.add_arguments, f"benchmarks: {', '.join(bench_cli.BENCHES)} (table + JSON)"),
    "data": (_add_data, "build data sets (HDF5) from their sources"),
    "plot": (_add_plot, "figures (accuracy, timing breakdown, trace, traffic) from run directories"),
    "gossip-lab": (gossip_lab.add_arguments, "watch n nodes average: gossip methods on a vectorised cluster or "
                                             "under MPI (error per round, spectral prediction, figure)"),
}


def build_parser() -> argparse.ArgumentParser:
    """The parser of every subcommand in :data:`SUBCOMMANDS`."""
    ap = Parser(prog="python -m minips", description="minips: data-parallel SGD, from scratch, for CPU clusters")
    sub = ap.add_subparsers(dest="command", required=True, parser_class=Parser,
                            metavar="{" + ",".join(SUBCOMMANDS) + "}")
    for name, (add_args, help_) in SUBCOMMANDS.items():
        add_args(sub.add_parser(name, help=help_))
    return ap


def main(argv=None) -> int:
    """Entry point; returns the exit status. User errors print one line, not a
    traceback; under mpiexec, once per job when caught before MPI starts."""
    try:
        args = build_parser().parse_args(argv)
    finally:
        interrupted = end_startup_sigint_deferral()
    if getattr(args, "reference_kernels", None):
        from .kernels import REFERENCE_ENV
        os.environ[REFERENCE_ENV] = "1"  # read by every kernel call (minips.kernels.reference_kernels)
    from .distributed.comm import fail_before_mpi, in_virtual_rank, launched_by_mpi, mpi_started
    under_mpi = launched_by_mpi() or in_virtual_rank()  # a virtual rank handles errors as an MPI rank does
    try:
        if interrupted:  # a Ctrl-C during the imports, held back until they were done
            raise KeyboardInterrupt
        if under_mpi and getattr(args, "virtual_ranks", None):
            raise ValueError("--virtual-ranks runs every rank as a thread of one process: start it without mpiexec "
                             "(or drop --virtual-ranks to run one rank per MPI process)")
        return args.func(args) or 0
    except BrokenPipeError:  # output piped into head/less that closed early: not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except USER_ERRORS as e:
        msg = f"error: {_numba_cache_message(e) or e}"
        if under_mpi and _world_size() > 1:
            from .distributed.comm import get_comm
            get_comm().abort(msg)  # ends every rank
        if os.environ.get("MINIPS_TRACEBACK"):
            print(msg, file=sys.stderr)
            raise
        if under_mpi and not mpi_started():  # every rank has the same options: once for the job
            return fail_before_mpi(msg, 2)
        print(msg, file=sys.stderr)
        return 2
    except BaseException as e:  # noqa: BLE001 - any other failure must not leave ranks hanging
        # KeyboardInterrupt (SIGINT on one rank) and SystemExit (sys.exit on one
        # rank) included: once MPI is up, a rank that leaves alone hangs the others.
        if under_mpi and _world_size() > 1:
            from .distributed.comm import abort_on_exception, get_comm
            abort_on_exception(get_comm(), e)
        if isinstance(e, KeyboardInterrupt) and not mpi_started():  # before any run: one line, not a traceback
            from .distributed.comm.mpi import stop_hint
            return fail_before_mpi("interrupted (SIGINT) while starting, before MPI started; ending every rank (to "
                                   f"stop a run and keep a checkpoint once it trains, {stop_hint()})" if under_mpi
                                   else "interrupted (SIGINT) while starting; nothing ran", 130)
        raise


def _numba_cache_message(e: BaseException) -> str | None:
    """The fix for a damaged Numba cache file (a kill while Numba wrote it, a
    full disk): its unpickling error names neither the file nor the cure.
    None when ``e`` did not come from Numba's cache."""
    if not isinstance(e, (EOFError, pickle.UnpicklingError)):
        return None
    path, tb = None, e.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_filename.endswith(os.path.join("numba", "core", "caching.py")):
            cache = frame.f_locals.get("self")
            path = frame.f_locals.get("path") or getattr(cache, "_index_path", None) or path
        tb = tb.tb_next
    if path is None:
        return None
    return (f"the Numba cache file {path} is damaged ({e}); delete the cache folder {Path(path).parent} "
            "(it is rebuilt on the next run)")


def _world_size() -> int:
    from .distributed.comm import world_size
    return world_size()
