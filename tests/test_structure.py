"""The layering of the package, read from the source with ``ast`` (nothing is imported).

Every ``import`` counts, at module level or inside a function: an import
circle hidden in a function still ties the layers together (and breaks when
the function runs during the other module's import). The rules are those of
docs/architecture.md; add a rule to ``FORBIDDEN`` when a layer gets a new one.
"""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "minips"

#: layer -> the only minips modules it may import (prefixes, dotted)
ONLY = {
    # data reads files and makes arrays: it knows no tensor, layer, model, task or MPI
    "minips.data": ("minips.data", "minips.kernels"),
}

#: layer -> minips modules it must not import (prefixes, dotted)
FORBIDDEN = {
    # nn is the layer library, built on tensor/autograd/ops/kernels only
    "minips.nn": ("minips.models", "minips.tasks", "minips.data", "minips.distributed", "minips.train",
                  "minips.optim"),
    # models are built from layers; tasks receive them, the algorithms drive them
    "minips.models": ("minips.tasks", "minips.distributed", "minips.train"),
    # tasks evaluate the model they are given, on data they load
    "minips.tasks": ("minips.models", "minips.distributed", "minips.train"),
}

#: (file, imported module) pairs allowed for now, each with its reason. An entry
#: that no longer matches an import fails the test, so it is removed once fixed.
PENDING: set = set()

#: the layers among which no import circle may exist
LAYERS = ("minips.nn", "minips.models", "minips.data", "minips.tasks")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict:
    """Dotted name -> file, for every module of minips (kernels/ is installed as
    minips.kernels)."""
    mods = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    for p in (ROOT / "kernels").rglob("*.py"):
        rel = p.relative_to(ROOT / "kernels").with_suffix("").parts
        mods[".".join(("minips", "kernels", *rel)).removesuffix(".__init__")] = p
    return mods


def imports_of(path: Path, name: str, modules: dict) -> set:
    """The minips modules that the file imports anywhere in it (relative imports resolved;
    ``from minips import nn`` counts as ``minips.nn``)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            found |= {f"{module}.{a.name}" for a in node.names if f"{module}.{a.name}" in modules}
    return {m for m in found if m == "minips" or m.startswith("minips.")}


def _layer(module: str):
    return next((layer for layer in LAYERS if _under(module, [layer])), None)


@pytest.fixture(scope="module")
def graph():
    """(file relative to the repository, module name, set of minips modules it imports)."""
    modules = _modules()
    return [(str(p.relative_to(ROOT)), name, imports_of(p, name, modules)) for name, p in sorted(modules.items())]


def _under(module: str, prefixes) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def test_layers_import_nothing_forbidden(graph):
    bad, used_pending = [], set()
    for rel, name, imported in graph:
        for m in sorted(imported - {"minips"}):  # the package root runs on any import anyway
            broken = [layer for layer, allowed in ONLY.items() if _under(name, [layer]) and not _under(m, allowed)]
            broken += [layer for layer, banned in FORBIDDEN.items() if _under(name, [layer]) and _under(m, banned)]
            if broken and (rel, m) in PENDING:
                used_pending.add((rel, m))
            elif broken:
                bad.append(f"{rel} imports {m} (the {broken[0]} layer must not)")
    assert not bad, "\n".join(bad)
    stale = PENDING - used_pending
    assert not stale, f"fixed, so remove from PENDING in tests/test_structure.py: {sorted(stale)}"


def test_no_import_circle_between_layers(graph):
    edges = {layer: set() for layer in LAYERS}
    for rel, name, imported in graph:
        src = _layer(name)
        if src is None:
            continue
        for m in imported:
            dst = _layer(m)
            if dst is not None and dst != src and (rel, m) not in PENDING:
                edges[src].add(dst)
    # depth-first search for a back edge
    state, path, circles = {}, [], []

    def visit(u):
        state[u] = "open"
        path.append(u)
        for v in sorted(edges[u]):
            if state.get(v) == "open":
                circles.append(" -> ".join(path[path.index(v):] + [v]))
            elif v not in state:
                visit(v)
        path.pop()
        state[u] = "done"
    for layer in LAYERS:
        if layer not in state:
            visit(layer)
    assert not circles, "import circles: " + "; ".join(circles)
