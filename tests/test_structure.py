"""The layering of the package, read from the source with ``ast`` (nothing is imported).

Every ``import`` counts, at module level or inside a function: an import
circle hidden in a function still ties the layers together (and breaks when
the function runs during the other module's import). So does a module loaded
by its name as a string (``importlib.import_module("minips.x")``, ``__import__``,
or a loop of such a call over a tuple of names: every string in that file that
names a minips module counts as imported). The rules are those of
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
    # the distributed layer (communication, cost models, graphs, compression, algorithms) and the
    # averaging methods know nothing of the labs that study them, nor of the entry points
    "minips.distributed": ("minips.labs", "minips.averaging", "minips.report", "minips.plots", "minips.train",
                           "minips.compare", "minips.cli", "minips.bench"),
    "minips.averaging": ("minips.labs", "minips.plots", "minips.report", "minips.cli", "minips.bench"),
    # the run's own layers (training loop, summary, figures) sit below the labs and the entry points
    "minips.train": ("minips.labs", "minips.cli", "minips.bench", "minips.compare"),
    "minips.report": ("minips.labs", "minips.cli", "minips.bench", "minips.compare"),
    "minips.plots": ("minips.labs", "minips.cli", "minips.bench", "minips.compare"),
    "minips.config": ("minips.labs", "minips.cli", "minips.bench", "minips.compare"),
    # the labs drive the algorithms and averaging methods; the entry points drive the labs
    "minips.labs": ("minips.cli", "minips.bench", "minips.compare"),
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


#: calls that load a module named by a string
_LOADERS = ("import_module", "__import__")


def _is_loader_call(node) -> bool:
    f = node.func
    return (isinstance(f, ast.Name) and f.id in _LOADERS) or (isinstance(f, ast.Attribute) and f.attr in _LOADERS)


def string_imports(tree, modules: dict) -> list:
    """(module, line) for each minips module that ``tree`` loads by name: the
    string argument of ``importlib.import_module(...)`` / ``__import__(...)``;
    and when such a call takes a computed name (a loop over a tuple of names,
    say), every string in the file that names a minips module."""
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and _is_loader_call(n)]
    found, computed = [], False
    for c in calls:
        arg = c.args[0] if c.args else None
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            if arg.value == "minips" or arg.value.startswith("minips."):
                found.append((arg.value, c.lineno))
        else:
            computed = True
    if computed:
        found += [(n.value, n.lineno) for n in ast.walk(tree)
                  if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in modules]
    return found


def _from_module(node: ast.ImportFrom, package: str) -> str:
    """The dotted module a ``from ... import`` names, relative imports resolved
    against ``package``."""
    if node.level:
        base = package.split(".")[:len(package.split(".")) - node.level + 1]
        return ".".join(base + ([node.module] if node.module else []))
    return node.module or ""


def imports_of(path: Path, name: str, modules: dict) -> set:
    """The minips modules that the file imports anywhere in it (relative imports resolved;
    ``from minips import nn`` counts as ``minips.nn``)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    found = {m for m, _ in string_imports(tree, modules)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            module = _from_module(node, package)
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


# --- no import circle among the modules -------------------------------------
#
# Which modules does ``import``-ing in a file run? ``import a.b.c`` and
# ``from a.b import c`` run ``a/__init__``, ``a/b/__init__`` and then ``a.b.c``;
# ``from a.b import name`` (a name, not a module) runs the package ``a.b`` and
# reads the name from its ``__init__``. So an import is an edge to the module it
# names, and to the packages on the way. The one exception: the packages that
# contain the importing file. Python has started them before it runs the file,
# so passing through them again runs nothing (``minips/__init__.py`` importing
# ``minips.tensor`` and ``minips/tensor.py`` importing ``minips.autograd`` is no
# circle). Reading a *name* from one of them is an edge like any other: that is
# how a submodule and its package's ``__init__`` make a circle.


def _ancestors(module: str) -> list:
    """``minips.nn.conv`` -> ``["minips", "minips.nn"]``."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def module_edges(path: Path, name: str, modules: dict) -> dict:
    """imported minips module -> the first line of ``path`` that imports it (edges as above)."""
    own = set(_ancestors(name)) | {name}
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    edges = {}

    def add(target: str, line: int):
        if target != "minips" and not target.startswith("minips."):
            return
        for m in [a for a in _ancestors(target) if a not in own] + [target]:
            if m != name:
                edges.setdefault(m, line)

    tree = ast.parse(path.read_text(), str(path))
    for target, line in string_imports(tree, modules):
        add(target, line)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                add(a.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            module = _from_module(node, package)
            for a in node.names:
                sub = f"{module}.{a.name}"
                add(sub if sub in modules else module, node.lineno)
    return {m: line for m, line in edges.items() if m in modules}


def import_circles(modules: dict, root: Path = ROOT) -> list:
    """One description per strongly connected component of the import graph
    (Tarjan's algorithm), each with a shortest circle through its first module."""
    edges = {name: module_edges(p, name, modules) for name, p in modules.items()}
    index, low, stack, on_stack, components = {}, {}, [], set(), []

    def strongconnect(u):
        index[u] = low[u] = len(index)
        stack.append(u)
        on_stack.add(u)
        for v in sorted(edges[u]):
            if v not in index:
                strongconnect(v)
                low[u] = min(low[u], low[v])
            elif v in on_stack:
                low[u] = min(low[u], index[v])
        if low[u] == index[u]:
            component = set()
            while True:
                v = stack.pop()
                on_stack.discard(v)
                component.add(v)
                if v == u:
                    break
            if len(component) > 1:
                components.append(component)

    for u in sorted(modules):
        if u not in index:
            strongconnect(u)
    circles = []
    for component in components:
        start = min(component)
        # breadth-first search back to start, inside the component
        parent, queue = {start: None}, [start]
        while queue and start not in {v for u in queue for v in edges[u]}:
            nxt = []
            for u in queue:
                for v in sorted(edges[u]):
                    if v in component and v not in parent:
                        parent[v] = u
                        nxt.append(v)
            queue = nxt
        last = next(u for u in queue if start in edges[u])
        path = [last]
        while parent[path[-1]] is not None:
            path.append(parent[path[-1]])
        path.reverse()
        steps = [f"{modules[u].relative_to(root)}:{edges[u][v]} imports {v}"
                 for u, v in zip(path, path[1:] + [start])]
        mutual = [f"{u} <-> {v}" for u in sorted(component) for v in sorted(edges[u]) if u < v and u in edges[v]]
        also = f" (modules importing each other: {', '.join(mutual)})" if len(component) > 2 and mutual else ""
        circles.append(f"{sorted(component)}: " + "; ".join(steps) + also)
    return circles


def test_no_import_circle_among_modules():
    circles = import_circles(_modules())
    assert not circles, "import circles:\n" + "\n".join(circles)


def test_the_circle_check_sees_circles(tmp_path):
    """The checker itself, on a made-up package: a submodule reading a name from
    its package's ``__init__`` closes a circle, importing a sibling does not."""
    pkg = tmp_path / "minips"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from .a import A\nfrom . import b\n")
    (pkg / "a.py").write_text("from . import b\nA = 1\n")
    (pkg / "b.py").write_text("def f():\n    from minips.c import g\n")
    (pkg / "c.py").write_text("import numpy\n")
    modules = {"minips": pkg / "__init__.py", "minips.a": pkg / "a.py",
               "minips.b": pkg / "b.py", "minips.c": pkg / "c.py"}
    assert import_circles(modules, tmp_path) == []
    (pkg / "c.py").write_text("def g():\n    from . import A\n")  # a name from __init__
    circles = import_circles(modules, tmp_path)
    assert len(circles) == 1 and circles[0].endswith("minips/c.py:2 imports minips"), circles
    (pkg / "c.py").write_text("from .b import f\n")  # b -> c -> b, one of them in a function
    circles_bc = import_circles(modules, tmp_path)
    assert circles_bc == ["['minips.b', 'minips.c']: minips/b.py:2 imports minips.c; "
                          "minips/c.py:1 imports minips.b"], circles_bc


def test_the_circle_check_sees_modules_loaded_by_name(tmp_path):
    """A module loaded through ``importlib.import_module`` is an import like any
    other: by a literal name, or by a loop over a tuple of names."""
    pkg = tmp_path / "minips"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def load():\n    import importlib\n    importlib.import_module('minips.b')\n")
    (pkg / "b.py").write_text("from .a import load\n")
    modules = {"minips": pkg / "__init__.py", "minips.a": pkg / "a.py", "minips.b": pkg / "b.py"}
    assert import_circles(modules, tmp_path) == ["['minips.a', 'minips.b']: minips/a.py:3 imports minips.b; "
                                                 "minips/b.py:1 imports minips.a"]
    (pkg / "a.py").write_text("from importlib import import_module\nNAMES = ('minips.b',)\n"
                              "def load():\n    for m in NAMES:\n        import_module(m)\n")
    assert import_circles(modules, tmp_path) == ["['minips.a', 'minips.b']: minips/a.py:2 imports minips.b; "
                                                 "minips/b.py:1 imports minips.a"]
    (pkg / "a.py").write_text("NAMES = ('minips.b',)\n")  # a string alone loads nothing
    assert import_circles(modules, tmp_path) == []


def test_no_module_is_loaded_by_name():
    """Plug-ins are rows of explicit tables that import them: nothing in minips
    loads a minips module from a string (docs/architecture.md, "Registries")."""
    modules = _modules()
    found = [f"{p.relative_to(ROOT)}:{line} loads {m} by name" for name, p in sorted(modules.items())
             for m, line in string_imports(ast.parse(p.read_text()), modules)]
    found += [f"{p.relative_to(ROOT)}:{n.lineno} calls {ast.unparse(n.func)}" for name, p in sorted(modules.items())
              for n in ast.walk(ast.parse(p.read_text())) if isinstance(n, ast.Call) and _is_loader_call(n)]
    assert not found, "use an import statement and a row in the kind's table:\n" + "\n".join(found)


# --- no module reads a private name of another --------------------------------
#
# A name that starts with one underscore is its module's own business: another
# module that needs it needs a public name (with a docstring), in the module
# that owns the thing. Two ways to reach one: ``from m import _x`` and ``m._x``
# where ``m`` was bound by an import to a minips module. (A package's
# ``__init__`` is a module of its own: its submodules are "another".)


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_uses(path: Path, name: str, modules: dict) -> list:
    """``"file:line reads module._x"`` for each private name of another minips
    module that the file imports or reads as an attribute of an imported module."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    bound, found = {}, []  # local name -> the minips module it is bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                bound[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            module = _from_module(node, package)
            for a in node.names:
                if module in modules and module != name and _private(a.name):
                    found.append((node.lineno, f"{module}.{a.name}"))
                elif f"{module}.{a.name}" in modules:
                    bound[a.asname or a.name] = f"{module}.{a.name}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            chain, v = [], node.value
            while isinstance(v, ast.Attribute):
                chain.insert(0, v.attr)
                v = v.value
            if isinstance(v, ast.Name) and v.id in bound:
                owner = ".".join([bound[v.id], *chain])
                if owner in modules and owner != name:
                    found.append((node.lineno, f"{owner}.{node.attr}"))
    rel = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    return [f"{rel}:{line} reads {what}" for line, what in sorted(set(found))]


def test_no_module_reads_a_private_name_of_another():
    modules = _modules()
    found = [use for name, p in sorted(modules.items()) for use in private_uses(p, name, modules)]
    assert not found, "make the name public (with a docstring) in the module that owns it:\n" + "\n".join(found)


def test_the_private_name_check_sees_both_forms(tmp_path):
    """The checker itself, on a made-up package: ``from .a import _x``, ``a._x``
    (a bound by ``from . import a``, ``import minips.a as a`` or ``import minips``
    then ``minips.a._x``) and a submodule reading its package's private name are
    found; a module's own private names, public names and dunders are not."""
    pkg = tmp_path / "minips"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("_STATE = []\n")
    (pkg / "a.py").write_text("_x = 1\ny = _x\n__all__ = []\n")
    modules = {"minips": pkg / "__init__.py", "minips.a": pkg / "a.py", "minips.b": pkg / "b.py"}
    cases = {"from .a import y, __all__\nfrom . import a\nz = a.y\n": [],
             "from .a import _x\n": ["minips.a._x"],
             "from . import a\nz = a._x\n": ["minips.a._x"],
             "def f():\n    import minips.a as m\n    return m._x\n": ["minips.a._x"],
             "import minips.a\nz = minips.a._x\n": ["minips.a._x"],
             "import minips\nz = minips._STATE\n": ["minips._STATE"],
             "from . import _STATE\n": ["minips._STATE"],
             "import numpy\nz = numpy._x\n": []}
    for code, expected in cases.items():
        (pkg / "b.py").write_text(code)
        got = [u.rpartition(" reads ")[2] for u in private_uses(pkg / "b.py", "minips.b", modules)]
        assert got == expected, (code, got)
    assert private_uses(pkg / "a.py", "minips.a", modules) == []  # its own


def test_tensor_syntax_is_bound_whatever_is_imported_first():
    """tensor.py imports nothing above it; the operators and backward() are bound by
    minips/__init__.py (minips.tensor_methods), which Python runs first."""
    import subprocess
    import sys
    code = ("from minips.tensor import Tensor\n"
            "x = Tensor([[1.0, 2.0]], requires_grad=True)\n"
            "y = ((x + 1) * x).exp().sum() / 2 - (x @ x.T).sum()\n"
            "y.backward()\n"
            "print(type(y).__name__, x.grad.shape)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["Tensor", "(1,", "2)"]


# --- a plain install carries every package ------------------------------------


def test_setup_cfg_lists_every_package():
    """A plain (non-editable) install, such as the wheel CI builds, carries only
    the packages setup.cfg lists: every folder of minips with an
    ``__init__.py`` must be one of them (minips.labs, minips.distributed.comm
    and minips.distributed.compression were missing, so a wheel lacked them)."""
    import configparser
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(ROOT / "setup.cfg")
    listed = set(cfg["options"]["packages"].split())
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in PACKAGE.rglob("__init__.py")}
    assert found - listed == set(), "add these to setup.cfg's [options] packages"
    assert "minips.kernels" in listed  # installed from kernels/ through package_dir


# Issue 34: a file does one job. A module longer than LONG_FILE lines either
# has several jobs (split it) or says, in its docstring, why its one job needs
# the length: a line starting with "Long because one job:".
LONG_FILE = 450
ONE_JOB = "Long because one job:"


def long_files_without_reason(roots) -> list[str]:
    """The .py files under ``roots`` longer than LONG_FILE lines whose module
    docstring has no line starting with ONE_JOB."""
    bad = []
    for root in roots:
        for path in sorted(Path(root).rglob("*.py")):
            text = path.read_text()
            if text.count("\n") <= LONG_FILE:
                continue
            doc = ast.get_docstring(ast.parse(text)) or ""
            if not any(line.strip().startswith(ONE_JOB) for line in doc.splitlines()):
                bad.append(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: "
                           f"{text.count(chr(10))} lines")
    return bad


def test_long_files_do_one_job_and_say_why():
    bad = long_files_without_reason([ROOT / "minips", ROOT / "kernels"])
    assert not bad, (f"modules over {LONG_FILE} lines without a '{ONE_JOB}' line in their docstring "
                     f"(split them by job, or say why they are one): {bad}")


def test_the_long_file_check_sees_a_long_file(tmp_path):
    body = "x = 1\n" * (LONG_FILE + 1)
    (tmp_path / "long.py").write_text('"""Several jobs."""\n' + body)
    (tmp_path / "ok.py").write_text(f'"""A table.\n\n{ONE_JOB} one table of all the rows.\n"""\n' + body)
    (tmp_path / "short.py").write_text('"""Short."""\n' + "x = 1\n" * 10)
    bad = long_files_without_reason([tmp_path])
    assert len(bad) == 1 and bad[0].endswith(f"long.py: {LONG_FILE + 2} lines")
