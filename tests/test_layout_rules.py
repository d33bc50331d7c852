"""Rules of the code's layout that a reviewer would otherwise check by hand:
one mpi4py importer, no algorithm name outside the algorithms package, and a
linter that reads every file of the package."""
import ast
import re
import subprocess
import sys
from pathlib import Path

from minips.distributed.algorithms import ALGORITHMS

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "minips").rglob("*.py")) + sorted((ROOT / "kernels").rglob("*.py"))
ALGO_PACKAGE = ROOT / "minips" / "distributed" / "algorithms"


def _rel(p: Path) -> str:
    return str(p.relative_to(ROOT))


def test_only_comm_imports_mpi4py():
    importers = set()
    for p in SOURCES:
        for node in ast.walk(ast.parse(p.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if any(n == "mpi4py" or n.startswith("mpi4py.") for n in names):
                importers.add(_rel(p))
    assert importers == {"minips/distributed/comm/mpi.py"}


def _docstrings(tree) -> set:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def names_in_code(paths, names) -> list[str]:
    """``file:line: text`` for every string literal (docstrings aside) that
    contains one of ``names`` as a whole word."""
    pat = re.compile(r"(?<![\w-])(" + "|".join(map(re.escape, sorted(names, key=len, reverse=True))) + r")(?![\w-])")
    hits = []
    for p in paths:
        tree = ast.parse(p.read_text())
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs \
                    and pat.search(node.value):
                hits.append(f"{_rel(p)}:{node.lineno}: {node.value[:80]!r}")
    return hits


def test_no_algorithm_name_outside_the_algorithms_package():
    """train, compare, bench, cli and the projection read the registry; the
    names live in minips/distributed/algorithms/ only (docstrings may cite them)."""
    outside = [p for p in SOURCES if ALGO_PACKAGE not in p.parents]
    assert names_in_code(outside, list(ALGORITHMS)) == []


def test_the_name_check_can_fail(tmp_path):
    f = tmp_path / "x.py"
    f.write_text('"""mentions pseudo-sync in a docstring: fine"""\nif algo == "pseudo-sync":\n    pass\n')
    global ROOT
    old, ROOT = ROOT, tmp_path
    try:
        assert names_in_code([f], list(ALGORITHMS)) == ["x.py:2: 'pseudo-sync'"]
    finally:
        ROOT = old


def test_ruff_reads_every_file_of_the_package_and_finds_nothing():
    ruff = [sys.executable, "-m", "ruff"]
    shown = subprocess.run([*ruff, "check", "--show-files", "minips", "kernels"], capture_output=True, text=True,
                           cwd=ROOT).stdout
    listed = {Path(line.strip()).resolve() for line in shown.splitlines() if line.strip().endswith(".py")}
    missing = [_rel(p) for p in SOURCES if p.resolve() not in listed]
    assert missing == [], f"ruff skips {missing}"
    r = subprocess.run([*ruff, "check", "minips", "kernels", "tests"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-3000:]
