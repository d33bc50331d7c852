"""One options style, one literal parser, explicit tables (issue 33): what a
value written as text means is the same for an algorithm's option, a
predictor's and a compressor's; the tables are complete when imported alone;
a colour depends on the name only."""
import pytest

from minips.options import convert_value, parse_literal


@pytest.mark.parametrize("text, want", [
    ("true", True), ("Yes", True), ("ON", True), ("false", False), ("no", False), ("Off", False),
    ("8", 8), ("-3", -3), ("0.5", 0.5), ("1e-3", 1e-3), ("1", 1), ("0", 0), ("ring", "ring"), ("", ""),
])
def test_parse_literal(text, want):
    got = parse_literal(text)
    assert got == want and type(got) is type(want)


@pytest.mark.parametrize("value, want", [
    ("true", True), ("YES", True), ("on", True), ("1", True), (1, True), (True, True),
    ("false", False), ("no", False), ("off", False), ("0", False), (0, False), (False, False),
])
def test_a_bool_option_takes_these_forms(value, want):
    assert convert_value(value, bool, "x") is want


@pytest.mark.parametrize("value", ["maybe", 2, "2", 0.5, ""])
def test_a_bool_option_refuses_the_rest(value):
    with pytest.raises(ValueError, match="x must be true or false"):
        convert_value(value, bool, "x")


@pytest.mark.parametrize("word, want", [("true", True), ("yes", True), ("on", True), ("1", True), ("TRUE", True),
                                        ("false", False), ("no", False), ("off", False), ("0", False)])
def test_a_word_means_the_same_to_every_kind(word, want):
    """An algorithm's own bool option, a predictor's (passed on by pseudo-sync)
    and a compressor's (passed on by topk-sgd, or in a compressor spec) read a
    word alike. Before, pseudo-sync refused sc=1 and compressors refused on/off/1/0."""
    from minips.distributed.algorithms import resolve
    from minips.distributed.compression import make_compressor
    assert resolve(f"local-sgd:average-momentum={word}").options.average_momentum is want
    assert resolve(f"pseudo-sync:predictor=spike:sc={word}").options.predictor_options["sc"] is want
    assert make_compressor(f"randomk:scale={word}").scale is want
    assert make_compressor("randomk", scale=word).scale is want


def test_one_literal_parser_in_the_package():
    """No module keeps a parser of its own (the two ``_literal`` functions disagreed)."""
    from pathlib import Path
    root = Path(__file__).resolve().parents[1] / "minips"
    own = [str(p.relative_to(root)) for p in root.rglob("*.py") if "def _literal(" in p.read_text()]
    assert own == []


def test_predictors_declare_options_dataclasses():
    import dataclasses

    from minips.distributed.algorithms.predictors import PREDICTORS, make_predictor
    from minips.options import fields_of
    for name, cls in PREDICTORS.items():
        assert dataclasses.is_dataclass(cls.Options), name
        assert not hasattr(cls, "OPTIONS"), name
        assert make_predictor(name, 2).options() == {"staleness": 2, **fields_of(cls.Options)}, name
    with pytest.raises(ValueError, match="predictor 'ema' has no option"):
        make_predictor("ema", 1, gamma=0.3)


TABLES = ("ALGORITHMS", "PREDICTORS", "COMPRESSORS", "METHODS", "SUBCOMMANDS", "BENCHES", "KERNEL_CASES")


def test_no_table_is_changed_at_import_time():
    """A table is written out where it is defined; no module adds rows to it when
    it is imported (before, pseudo_sync.py ran ``PREDICTORS.update(COMPENSATIONS)``)."""
    import ast
    from pathlib import Path
    root = Path(__file__).resolve().parents[1] / "minips"
    found = []
    for p in sorted(root.rglob("*.py")):
        for node in ast.parse(p.read_text()).body:  # module level only
            for sub in ast.walk(node) if not isinstance(node, (ast.FunctionDef, ast.ClassDef)) else ():
                target = None
                if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute):
                    target = sub.func.value  # PREDICTORS.update(...), KERNEL_CASES.append(...)
                elif isinstance(sub, (ast.Assign, ast.AugAssign)):
                    tgts = sub.targets if isinstance(sub, ast.Assign) else [sub.target]
                    target = next((t.value for t in tgts if isinstance(t, ast.Subscript)), None)
                if isinstance(target, ast.Name) and target.id in TABLES:
                    found.append(f"{p.relative_to(root)}:{sub.lineno} changes {target.id}")
    assert found == []


def test_every_predictor_is_a_row_of_the_written_table():
    import ast
    from pathlib import Path

    from minips.distributed.algorithms import predictors
    tree = ast.parse(Path(predictors.__file__).read_text())
    table = next(n for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "PREDICTORS")
    written = {n.id for n in ast.walk(table.value) if isinstance(n, ast.Name)} - {"cls"}
    assert written == {cls.__name__ for cls in predictors.PREDICTORS.values()}


def test_algorithm_colour_follows_the_name_not_the_table(monkeypatch):
    """Inserting a row at the top of ALGORITHMS recolours nothing (before, the
    colour was the palette entry at the row's position)."""
    from minips import plots
    from minips.distributed import algorithms
    names = list(algorithms.ALGORITHMS)
    before = {n: plots.algo_color(n) for n in names}
    monkeypatch.setattr(algorithms, "ALGORITHMS", {"a-new-one": object, **algorithms.ALGORITHMS})
    assert {n: plots.algo_color(n) for n in names} == before
    assert all(len(c) == 7 and c.startswith("#") for c in before.values())
    assert len({before["sync"], before["overlap-sync"], before["pseudo-sync"]}) == 3


def test_subcommands_and_benchmarks_come_from_their_tables():
    import argparse

    from minips.bench.cli import BENCHES
    from minips.cli import SUBCOMMANDS, build_parser
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert list(sub.choices) == list(SUBCOMMANDS)
    bench = next(a for a in sub.choices["bench"]._actions if isinstance(a, argparse._SubParsersAction))
    assert list(bench.choices) == list(BENCHES) == ["kernels", "lstm", "comm", "scaling", "study", "train",
                                                     "virtual"]


# --- compressors and averaging methods: Options dataclasses too ----------------------------------------------

def _compressors():
    from minips.distributed.compression import COMPRESSORS
    return list(COMPRESSORS)


@pytest.mark.parametrize("name", _compressors())
def test_every_compressor_declares_an_options_dataclass(name):
    """A compressor's options are the fields of its ``Options``, each set as an
    attribute of that name (before: constructor keywords read with inspect.signature)."""
    import dataclasses

    from minips.distributed.compression import COMPRESSORS, compressor_options, make_compressor
    from minips.options import fields_of
    cls = COMPRESSORS[name]
    assert dataclasses.is_dataclass(cls.Options)
    assert compressor_options(name) == fields_of(cls.Options)
    c = make_compressor(name)
    assert {k: getattr(c, k) for k in fields_of(cls.Options)} == fields_of(cls.Options)


def test_no_signature_reading_in_the_compressors():
    from pathlib import Path

    from minips.distributed import compression
    folder = Path(compression.__file__).parent
    assert [p.name for p in folder.glob("*.py") if "inspect" in p.read_text()] == []


def _typed_word(tp):
    """A valid value of an option of type tp, as text and as the Python value it means."""
    return {int: ("3", 3), float: ("0.25", 0.25), bool: ("off", False)}[tp]


#: every option of every compressor with its type, written out so that the tests
#: below collect on any code (test_the_options_listed_here_are_the_fields checks it)
COMPRESSOR_OPTIONS = [("topk", "k", int), ("topk", "ratio", float),
                      ("randomk", "k", int), ("randomk", "ratio", float), ("randomk", "seed", int),
                      ("randomk", "scale", bool),
                      ("qsgd-quant", "s", int), ("qsgd-quant", "bucket", int), ("qsgd-quant", "seed", int),
                      ("countsketch", "rows", int), ("countsketch", "cols", int), ("countsketch", "ratio", float),
                      ("countsketch", "seed", int),
                      ("gaussian", "ratio", float), ("gaussian", "block", int), ("gaussian", "seed", int)]


def _compressor_option_cases():
    return COMPRESSOR_OPTIONS


def test_the_options_listed_here_are_the_fields():
    import typing

    from minips.distributed.compression import COMPRESSORS
    from minips.options import base_type
    assert COMPRESSOR_OPTIONS == [(name, k, base_type(tp)) for name, cls in COMPRESSORS.items()
                                  for k, tp in typing.get_type_hints(cls.Options).items()]


@pytest.mark.parametrize("name, key, tp", _compressor_option_cases())
def test_a_compressor_option_means_the_same_through_every_route(name, key, tp):
    """A spec's text, a keyword given as text, as the Python value, as a NumPy
    value, and a compressed algorithm's spec that passes it on build the same
    compressor (before, a NumPy integer was refused: 'must be an integer, got np.int64(3)')."""
    import numpy as np

    from minips.distributed.algorithms import resolve
    from minips.distributed.algorithms.compressed_common import compressor_kwargs
    from minips.distributed.compression import make_compressor
    text, value = _typed_word(tp)
    as_numpy = {int: np.int64, float: np.float64, bool: np.bool_}[tp](value)
    spec = resolve(f"topk-sgd:error-feedback=false:compressor={name}:{key.replace('_', '-')}={text}").options
    built = [make_compressor(f"{name}:{key}={text}"), make_compressor(name, **{key: text}),
             make_compressor(name, **{key: value}), make_compressor(name, **{key: as_numpy}),
             make_compressor(spec.compressor, **compressor_kwargs(spec))]
    got = [getattr(c, key) for c in built]
    assert got == [value] * 5 and all(type(g) is tp for g in got), got
    assert len({c.describe() for c in built[:4]}) == 1  # topk-sgd adds its own defaults (randomk: scale=false)


@pytest.mark.parametrize("name, key, tp", [c for c in _compressor_option_cases() if c[2] is not bool])
def test_the_value_an_error_suggests_is_accepted(name, key, tp):
    """``write e.g. K=V`` names a value the compressor takes (before,
    countsketch suggested cols=1, which it refuses: cols must be >= 2)."""
    import re

    from minips.distributed.compression import make_compressor
    with pytest.raises(ValueError) as e:
        make_compressor(f"{name}:{key}=abc")
    hint = re.search(rf"write e\.g\. ({key}=\S+)$", str(e.value))
    if key == "k":
        assert str(e.value).endswith("for a fraction use ratio=")
        return
    assert hint, str(e.value)
    make_compressor(f"{name}:{hint.group(1)}")


@pytest.mark.parametrize("name", ["identity", "fp16", "sign"])
def test_a_compressor_without_options_says_so(name):
    """Before: 'its options: args, kwargs' (the signature of object.__init__)."""
    from minips.distributed.compression import make_compressor
    with pytest.raises(ValueError, match=f"compressor {name} has no option 'zz'; its options: none$"):
        make_compressor(f"{name}:zz=1")


def _methods():
    from minips.averaging import METHODS
    return list(METHODS)


@pytest.mark.parametrize("name", _methods())
def test_every_averaging_method_declares_an_options_dataclass(name):
    """An averaging method's options are the fields of its class's ``Options``;
    the lab routes its flags by them (before: a dict of tuples, ``averaging.OPTIONS``)."""
    import dataclasses

    from minips import averaging
    from minips.averaging import METHODS, make_method
    from minips.distributed.topology import make_topology as make_graph
    from minips.labs.averaging_cli import _accepts
    from minips.options import fields_of
    assert not hasattr(averaging, "OPTIONS")
    cls = METHODS[name][0]
    assert dataclasses.is_dataclass(cls.Options)
    assert _accepts(name) == tuple(fields_of(cls.Options))
    g = make_graph("ring", 8)
    m = make_method(name, g)
    assert dataclasses.asdict(m.options) == fields_of(cls.Options)
    others = sorted({k for m2 in METHODS.values() for k in fields_of(m2[0].Options)} - set(fields_of(cls.Options)))
    with pytest.raises(ValueError, match=f"^--method {name} does not take --{others[0].replace('_', '-')}$"):
        make_method(name, g, **{others[0]: 1})


@pytest.mark.parametrize("name, key, text, value", [
    ("accelerated", "alpha", "1.2", 1.2), ("periodic", "order_seed", "5", 5), ("aco-local", "rho", "0.3", 0.3),
    ("aco-global", "tau_min", "0", 0.0), ("push-sum", "join", "3", 3), ("push-sum", "estimate", "sum", "sum"),
])
def test_an_averaging_option_means_the_same_as_text_and_as_a_value(name, key, text, value):
    from minips.averaging import make_method
    from minips.distributed.topology import make_topology as make_graph
    g = make_graph("exponential" if name == "push-sum" else "ring", 8)
    a, b = make_method(name, g, **{key: text}), make_method(name, g, **{key: value})
    assert getattr(a.options, key) == getattr(b.options, key) == value
    assert type(getattr(a.options, key)) is type(value)
    with pytest.raises(ValueError, match=f"--{key.replace('_', '-')} must be"):
        make_method(name, g, **{key: [1]})
