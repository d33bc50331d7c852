"""The docs stand alone: every repository file that the docs, the tutorials,
the package's docstrings and ``python -m minips algorithms`` cite exists in the
repository, none of them cites a guide outside it, and every "specifications.md
section N" names a section that docs/specifications.md has.

What counts as a citation: a path that starts with one of the repository's
top-level folders (``docs/bench/x.txt``, ``scripts/timing.sh``, ...) and ends
in a file name with an extension (or a glob), and every relative link target
of a markdown file (``[results.md](results.md#10-...)``, resolved from the
file's folder). Existence is checked against ``git ls-files`` (what a clone
has), so a file that exists only in this checkout does not pass.
"""
import fnmatch
import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOP = ("docs", "scripts", "configs", "tests", "tutorials", "examples", "minips", "kernels", "data")
PATH = re.compile(r"(?<![\w./-])((?:%s)/[\w./*-]*[\w*/])" % "|".join(TOP))
LINK = re.compile(r"\]\(([^)\s]+)\)")
SECTION = re.compile(r"specifications\.md\)?\s+section\s+(\d+)")
# Paths the docs name as what a command writes, not as a committed file.
OUTPUTS = {
    "data/fashion-mnist.h5",          # python -m minips data fashion-mnist --out data/fashion-mnist.h5
    "docs/bench/headline-DATE.txt",   # scripts/bench_headline.sh's output name, DATE a placeholder
    "kernels/__pycache__/*.nbi",      # Numba's cache, written on the first run
}
# The project's private guides: cited nowhere (built here so that this file does not cite them).
GUIDES = tuple(name + ".md" for name in ("ALGORITHMS", "DESIGN", "STALENESS", "MISSION")) + tuple(
    prefix + "shared" for prefix in ("../", "/work/"))


def tracked() -> set[str]:
    try:
        out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: git ls-files is how committed files are told from local ones")
    return set(out.split())


def folders(files: set[str]) -> set[str]:
    out = set()
    for f in files:
        d = os.path.dirname(f)
        while d:
            out.add(d)
            d = os.path.dirname(d)
    return out


def sources(files: set[str], tests: bool = False) -> list[str]:
    """The texts a reader meets: README, docs, tutorials, the package (docstrings), scripts, configs,
    examples; with ``tests``, the tests too (they name made-up paths, so not for the path check)."""
    return sorted(f for f in files if f == "README.md" or (
        f.split("/")[0] in TOP and f.endswith((".md", ".py", ".sh", ".toml")) and not f.startswith("docs/bench/")
        and (tests or not f.startswith("tests/"))))


def cited_paths(text: str):
    for m in PATH.finditer(text):
        p = m.group(1).rstrip(".")
        last = p.rstrip("/").rsplit("/", 1)[-1]
        if "." in last or "*" in last:  # a file or a glob (folders are often outputs: data/cache/)
            yield p


def algorithms_text() -> str:
    from minips.distributed.algorithms import describe_algorithms
    parts = []
    for r in describe_algorithms():
        parts += [r["summary"], r["paper"] or ""] + [o["help"] for o in r["options"]]
    return "\n".join(parts)


def test_every_cited_file_exists_in_the_repository():
    files = tracked()
    have = files | folders(files)

    def exists(p: str) -> bool:
        p = p.rstrip("/")
        return any(fnmatch.fnmatch(f, p) for f in files) if "*" in p else p in have

    missing = []
    texts = [(f, (ROOT / f).read_text(errors="replace")) for f in sources(files)]
    texts.append(("python -m minips algorithms", algorithms_text()))
    for name, text in texts:
        for p in cited_paths(text):
            if p not in OUTPUTS and not exists(p):
                missing.append(f"{name}: {p}")
        if name.endswith(".md"):
            for m in LINK.finditer(text):
                target = m.group(1).split("#")[0]
                if not target or target.startswith(("http:", "https:", "mailto:")):
                    continue
                q = os.path.normpath(os.path.join(os.path.dirname(name), target))
                if not exists(q):
                    missing.append(f"{name}: link {target}")
    assert not missing, "cited but not in the repository:\n" + "\n".join(missing)


def test_nothing_cites_a_guide_outside_the_repository():
    files = tracked()
    texts = [(f, (ROOT / f).read_text(errors="replace")) for f in sources(files, tests=True)]
    texts.append(("python -m minips algorithms", algorithms_text()))
    bad = [f"{name}: {g}" for name, text in texts for g in GUIDES if g in text]
    assert not bad, "cites a file outside the repository (restate it in docs/ and cite that):\n" + "\n".join(bad)


def test_every_cited_specification_section_exists():
    spec = (ROOT / "docs" / "specifications.md").read_text()
    have = {int(n) for n in re.findall(r"^## (\d+)\. ", spec, re.M)}
    assert have == set(range(1, max(have) + 1))  # numbered 1..N, none skipped or repeated
    files = tracked()
    texts = [(f, (ROOT / f).read_text(errors="replace")) for f in sources(files)]
    texts.append(("python -m minips algorithms", algorithms_text()))
    bad = [f"{name}: section {n}" for name, text in texts for n in SECTION.findall(text) if int(n) not in have]
    assert not bad, "docs/specifications.md has no such section:\n" + "\n".join(bad)


def test_every_reconstruction_says_so_where_minips_algorithms_lists_it():
    """A method whose class docstring says reconstruction says it in its paper line too, and points to
    its specification."""
    from minips.distributed.algorithms import ALGORITHMS
    bad = [name for name, cls in ALGORITHMS.items()
           if "reconstruction" in (cls.__doc__ or "").lower()
           and not ("reconstruction" in cls.paper.lower() and "docs/specifications.md section" in cls.paper)]
    assert not bad, f"reconstructions without 'reconstruction' and their specification in `paper`: {bad}"


def test_algorithm_summaries_are_whole_sentences():
    from minips.distributed.algorithms import describe_algorithms
    cut = [r["name"] for r in describe_algorithms() if not r["summary"].rstrip().endswith((".", ")"))]
    assert not cut, f"summaries that stop mid-sentence in `minips algorithms`: {cut}"


def _slug(heading: str) -> str:
    """GitHub's anchor of a markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_link_to_a_section_names_a_heading_of_its_file():
    files = [f for f in sources(tracked()) if f.endswith(".md")]
    anchors = {f: {_slug(h) for h in re.findall(r"^#+ (.+)$", (ROOT / f).read_text(), re.M)} for f in files}
    bad = []
    for f in files:
        for m in LINK.finditer((ROOT / f).read_text()):
            target = m.group(1)
            if target.startswith(("http:", "https:", "mailto:")) or "#" not in target:
                continue
            path, anchor = target.split("#", 1)
            q = os.path.normpath(os.path.join(os.path.dirname(f), path)) if path else f
            if q in anchors and anchor not in anchors[q]:
                bad.append(f"{f}: {target}")
    assert not bad, "links to a section that does not exist:\n" + "\n".join(bad)
