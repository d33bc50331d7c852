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
