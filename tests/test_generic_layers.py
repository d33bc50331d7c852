"""The generic layers never branch on an algorithm's, predictor's or option's name.

The files checked (:data:`GENERIC_FILES`) are the ones that drive every
algorithm through its interface or handle what every run writes: the run's
options (config.py) and their command line (cli.py, which also holds other
subcommands), the training loop (train.py), what a run reports and draws
(report.py, plots/, rundir.py), checkpoints (checkpoint.py), runs of several
algorithms (compare.py), the cost-model projection (labs/projection.py)
and every benchmark (bench/*.py). Left out: the algorithms package itself
(where names belong), the plug-in kinds with tables of their own
(compression/, averaging/), the laboratories that study one method's parts
(labs/staleness.py studies the predictors), and the layers below
the algorithms (comm/, flat.py, topology.py, kernels, models, tasks), which
know no algorithm anyway.

What counts as naming one (read from the syntax tree, so comments and
docstrings, which may give examples, do not count): a string literal equal to
a name (after dropping leading dashes and ``[...]``, with dashes read as
underscores: ``"--bucket-mb"``, ``"[predictor_options]"``), a spec literal
that starts with one (``"pseudo-sync:local"``), or an attribute, keyword,
parameter or variable of that name (``cfg.staleness``, ``predictor=...``).

The names: every registered algorithm, every predictor, every option of
every algorithm (its ``Options`` fields and the keys its ``extra_options``
lists), and what the algorithms declare to the generic layers (their trace
columns and profile extras). Option names that are also the generic layers'
own words, with their own meaning there, are exempt (:data:`GENERIC_WORDS`,
each with the reason), as are names of one or two characters (the letters of
formulas: k, c, p, ...).

Run on the files as they were before the issue "Generic layers that know no
algorithm" (commit b918e31), it finds: config.py (``"predictor"``,
``"staleness"``, ``"bucket_mb"``, ``"predictor_options"``,
``"[predictor_options]"`` and the fields of those names), cli.py
(``"--predictor"``, ``"--staleness"``, ``"--bucket-mb"``), train.py
(``"staleness"``), report.py (``"predictor"``, ``"staleness"``,
``"predictor_options"``, ``buckets``), plots.py (``"lambda"``,
``"cos_forecast"``), labs/projection.py (``buckets``: a StepProfile
field), bench/scaling.py (``bucket_mb``, ``"--bucket-mb"``, ``buckets``) and
bench/study.py (``"predictor_options"``).
"""
import ast
import dataclasses
import re
from pathlib import Path

import pytest

from minips.distributed.algorithms import ALGORITHMS
from minips.distributed.algorithms.predictors import PREDICTORS

PKG = Path(__file__).resolve().parents[1] / "minips"

GENERIC_FILES = sorted({*(PKG / f for f in ("config.py", "cli.py", "train.py", "report.py", "rundir.py",
                                            "checkpoint.py", "compare.py", "labs/projection.py",
                                            "distributed/costmodel.py")),
                        *(PKG / "bench").rglob("*.py"), *(PKG / "plots").glob("*.py")})

#: option names that are also the generic layers' own words, with their meaning there
GENERIC_WORDS = {
    "data": "the run's data set (TrainConfig.data) and arrays' .data",
    "seed": "the run's seed (TrainConfig.seed) and the topology command's --seed",
    "momentum": "the optimizer's momentum (TrainConfig.momentum)",
    "schedule": "the learning-rate schedule (TrainConfig.schedule)",
    "warmup": "the timed warm-up steps every run leaves out of its means (trace.csv's warmup column)",
    "rank": "a process's rank in the communicator (comm.rank)",
    "start": "Algorithm.start(), which every run calls",
    "rows": "rows of tables and of the step timer (timer.rows)",
    "cols": "columns of a benchmarked matrix",
    "alpha": "the alpha-beta network model's latency (NetworkModel.alpha)",
    "beta": "the alpha-beta network model's seconds per byte (NetworkModel.beta)",
    "mode": "a benchmark's or the progress engine's mode",
    "ratio": "a plain ratio of two measurements",
    "slowdown": "bench comm's measured slowdown of compute under communication",
    "consensus": "the consensus distance every run whose ranks differ reports",
    "radius": "the random-geometric topology's radius (the topology command)",
    "period": "a time-varying topology's period (the topology command and figure)",
    "topology": "the topology command",
    "shapes": "the model's parameter shapes, which the generic layers hand to every algorithm's profile_extras",
    "predict": "a standard phase of the step timer (timing.PHASES, 0 when unused) that every run's "
               "time_breakdown and trace.csv carry; the phase list itself is outside these files",
}


def checked_names(literals_only: bool = False) -> set[str]:
    """The names to look for; ``literals_only``: also those that are checked only
    in string literals (algorithm and predictor names: a variable called
    ``last`` is not the predictor)."""
    names = set(ALGORITHMS) | set(PREDICTORS) if literals_only else set()
    for cls in ALGORITHMS.values():
        names |= {f.name for f in dataclasses.fields(cls.Options)}
        for opts in cls.extra_options().values():
            names |= set(opts)
        default = cls.Options()
        names |= set(cls.trace_columns(default)) | set(cls.PROFILE_EXTRAS)
    return {_norm(n) for n in names if len(n) > 2} - set(GENERIC_WORDS)


def _norm(text: str) -> str:
    return text.strip().lstrip("-[").rstrip("]").replace("-", "_")


def names_in(source: str, names: set[str], idents: set[str]) -> list[tuple[int, str]]:
    """(line, what) for each place in ``source`` (Python) whose string literal
    names one of ``names``, or whose identifier is one of ``idents``."""
    tree = ast.parse(source)
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    found = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs:
            text = _norm(n.value)
            spec = re.match(r"^([a-z0-9_]+)[:@]", text)
            if text in names or (spec and spec.group(1) in names):
                found.append((n.lineno, repr(n.value)))
        ident = (n.attr if isinstance(n, ast.Attribute) else n.arg if isinstance(n, (ast.keyword, ast.arg))
                 else n.id if isinstance(n, ast.Name) else None)
        if ident and ident in idents:
            found.append((n.lineno, ident))
    return sorted(found)


def test_the_names_checked_are_the_registry_s():
    """The check cannot pass by checking nothing: the names come from the
    registry and include those the issue found in the generic layers."""
    names, idents = checked_names(literals_only=True), checked_names()
    assert {"pseudo_sync", "overlap_sync", "local_sgd", "last", "dc_asgd"} <= names - idents
    assert {"staleness", "predictor", "predictor_options", "bucket_mb", "lambda", "cos_forecast", "buckets",
            "rho", "h_max"} <= idents <= names
    for word in GENERIC_WORDS:  # every exemption is a real option name (else it is stale: remove it)
        assert any(word in {f.name for f in dataclasses.fields(c.Options)} | set(c.PROFILE_EXTRAS)
                   | {k for o in c.extra_options().values() for k in o} for c in ALGORITHMS.values()), word
    # the scanner sees each form it looks for, and not docstrings
    src = ('"""pseudo-sync in a docstring"""\nx = cfg.staleness\nf(predictor=1)\ny = "--bucket-mb"\n'
           'z = "pseudo-sync:local"\ndef g(buckets): pass\nw = "the last step"\n')
    assert names_in(src, names, idents) == [(2, "staleness"), (3, "predictor"), (4, "'--bucket-mb'"),
                                    (5, "'pseudo-sync:local'"), (6, "buckets")]


@pytest.mark.parametrize("path", GENERIC_FILES, ids=lambda p: str(p.relative_to(PKG)))
def test_generic_file_names_no_algorithm(path):
    found = names_in(path.read_text(encoding="utf-8"), checked_names(literals_only=True), checked_names())
    assert not found, (f"{path.relative_to(PKG.parent)} names algorithm-specific things (line: name): "
                       + ", ".join(f"{line}: {what}" for line, what in found)
                       + "; ask the algorithm through its hooks (Algorithm.preflight, trace_columns, "
                         "profile_extras, report) or the option-flag table instead")
