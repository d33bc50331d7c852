"""Issue 41: every committed table that the README or a default rests on rebuilds, unchanged, from
the raw runs committed under docs/bench/ (never from the ignored runs/ folder), and a table script
of a finished study refuses to run when a run it needs is missing instead of building the table from
fewer seeds (the time-to-accuracy map is built from the runs committed so far while its study runs,
and says how many: its map.md's first line).

The tables: docs/bench/accuracy/five/tables.md (the 5-seed tables: why `local` is the default),
docs/bench/accuracy/gaps/tables.md (docs/accuracy.md section 8), docs/bench/scale/study1/
accuracy-vs-P.md (study 1 at 16-128 ranks, superseded, from its per-run record) and
docs/bench/scale/screen-43/adaptive-local-lambda/table.md (the correction weight a learning rule
settles on in the stability map's runs, docs/accuracy.md section 11.4, from their per-step traces)
and docs/bench/scale/screen-43/correction05-verdict/verdict.md (issue 43's candidate against sync on
fresh seeds, section 11.8), docs/bench/time-to-accuracy/time-axis/time-axis.md (issue 52's check of the
time axis) and docs/bench/time-to-accuracy/map.md with the study report beside it (issue 52's map: the
first method to the target per network, phi and P).
Each script runs in a clean copy of what git tracks (:func:`clean_checkout`) and its output is
compared with the committed files: most read a few hundred small JSON files in well under a second,
adaptive_local_lambda about 60 traces (solving the staleness model's stability for each learnt weight,
about a second), the map about 50 runs' summaries through ``bench study --report-only`` (about 2 s
without its figures)."""
import importlib
import json
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"


def _script(name):
    sys.path.insert(0, str(SCRIPTS))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(SCRIPTS))


#: each table script and the committed files it writes
TABLE_SCRIPTS = {
    "five_seed_tables": ["docs/bench/accuracy/five/tables.md", "docs/bench/accuracy/five/tables.json"],
    "gap_tables": ["docs/bench/accuracy/gaps/tables.md", "docs/bench/accuracy/gaps/tables.json"],
    "scale_study": ["docs/bench/scale/study1/accuracy-vs-P.md", "docs/bench/scale/study1/accuracy-vs-P.json"],
    "adaptive_local_lambda": ["docs/bench/scale/screen-43/adaptive-local-lambda/table.md",
                              "docs/bench/scale/screen-43/adaptive-local-lambda/table.json"],
    "verdict_43": ["docs/bench/scale/screen-43/correction05-verdict/verdict.md"],
    "time_axis_check": ["docs/bench/time-to-accuracy/time-axis/time-axis.md"],
    "time_to_accuracy_map": ["docs/bench/time-to-accuracy/map.md", "docs/bench/time-to-accuracy/map.json",
                             "docs/bench/time-to-accuracy/contrasts.json",
                             "docs/bench/time-to-accuracy/report/study-time-to-accuracy.md",
                             "docs/bench/time-to-accuracy/report/study-time-to-accuracy.json"],
}
#: arguments a script's rebuild runs with: the tables only, not the figures (matplotlib's seconds)
SCRIPT_ARGS = {"time_to_accuracy_map": ["--no-figures"]}


@pytest.fixture(scope="module")
def clean_checkout(tmp_path_factory):
    """The files git tracks under scripts/, docs/bench/ and configs/ (a study's grid), copied alone
    into a fresh folder: what a clean clone holds there. A run folder that exists here but is
    untracked or ignored (the way issue 25's raw runs were lost) is absent from the copy."""
    import subprocess
    root = tmp_path_factory.mktemp("clean")
    names = subprocess.run(["git", "ls-files", "-z", "--", "scripts", "docs/bench", "configs"], cwd=ROOT,
                           check=True, capture_output=True).stdout.decode().split("\0")
    for name in filter(None, names):
        if (ROOT / name).is_file():  # a tracked file deleted in the work tree is not copied
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, root / name)
    return root


@pytest.mark.parametrize("name", sorted(TABLE_SCRIPTS))
def test_every_table_rebuilds_unchanged_from_the_committed_runs(name, clean_checkout, tmp_path):
    """Each table script, run as a user runs it in the clean copy (it reads its runs relative to its
    own file and writes its tables; with :data:`SCRIPT_ARGS`), succeeds and writes exactly the committed tables."""
    import subprocess
    copy = tmp_path / "clean"
    shutil.copytree(clean_checkout, copy)
    r = subprocess.run([sys.executable, str(copy / "scripts" / f"{name}.py"), *SCRIPT_ARGS.get(name, [])], cwd=copy,
                       capture_output=True, text=True, timeout=120,
                       env={**__import__("os").environ, "MPLBACKEND": "Agg"})
    assert r.returncode == 0, (r.stdout + r.stderr)[-2000:]
    for table in TABLE_SCRIPTS[name]:
        assert (copy / table).read_text() == (ROOT / table).read_text(), \
            f"{name}.py rebuilt {table} differently from the committed file"


def test_a_table_refuses_when_a_run_it_needs_is_missing(tmp_path, monkeypatch):
    five = _script("five_seed_tables")
    real = five.folder
    gone = real("full", 8, "pseudo-sync:local:1", 4)
    # the table's run at full P = 8, local, seed 4 is hidden: the script must stop, not drop the seed
    monkeypatch.setattr(five, "folder", lambda *a: tmp_path / "absent" if real(*a) == gone else real(*a))
    with pytest.raises(SystemExit, match=r"five_seed_tables.py: 1 of the 40 raw runs it needs are missing "
                                         r"\(first: .*absent/summary.json"):
        five.build()


def test_a_finished_run_without_its_metrics_is_missing_too(tmp_path):
    raw = _script("raw_runs")
    src = _script("five_seed_tables").folder("full", 4, "sync", 0)
    shutil.copytree(src, tmp_path / "run")
    (tmp_path / "run" / "metrics.csv").unlink()
    with pytest.raises(SystemExit, match="1 of the 1 raw runs"):
        raw.load({"a": tmp_path / "run"}, "t.py")
    # a diverged run's record (bench study writes it as summary.json) needs no metrics.csv
    (tmp_path / "div").mkdir()
    (tmp_path / "div" / "summary.json").write_text(json.dumps({"status": "diverged"}))
    got = raw.load({"d": tmp_path / "div"}, "t.py")
    assert raw.value(got["d"], "val_accuracy").why == "diverged"


@pytest.mark.parametrize("table,docs", [
    ("docs/bench/accuracy/five/tables.md", ["docs/accuracy.md", "docs/results.md"]),
    ("docs/bench/accuracy/gaps/tables.md", ["docs/accuracy.md"]),
    ("docs/bench/scale/study1/accuracy-vs-P.md", ["docs/results.md"]),
    ("docs/bench/scale/screen-43/adaptive-local-lambda/table.md", ["docs/accuracy.md"]),
    ("docs/bench/scale/screen-43/correction05-verdict/verdict.md", ["docs/accuracy.md"]),
    ("docs/bench/time-to-accuracy/time-axis/time-axis.md", ["docs/outputs.md"]),
    # the map and its first contrast (the default pseudo-sync against overlap-sync)
    ("docs/bench/time-to-accuracy/map.md#2", ["docs/choosing.md"]),
])
def test_the_docs_quote_the_committed_tables(table, docs):
    """Where a doc copies a committed table, it copies it as it is now: every data row of the
    table appears, unchanged, in each doc that quotes it (a stale copy fails here). ``FILE#N``:
    the rows of FILE's first N tables only."""
    table, _, first = table.partition("#")
    lines, tables, previous = [], 0, ""
    for line in (ROOT / table).read_text().splitlines():
        tables += line.startswith("|") and not previous.startswith("|")
        previous = line
        if not first or tables <= int(first):
            lines.append(line)
    rows = [line for line in lines
            if line.startswith("| ") and not line.startswith(("| P |", "| rule |", "| lr |"))]
    assert rows
    for doc in docs:
        text = (ROOT / doc).read_text()
        stale = [r for r in rows if r not in text]
        assert not stale, f"{doc} does not quote {len(stale)} row(s) of {table} as they are, e.g. {stale[0]}"


def test_raw_run_folders_under_docs_bench_are_not_ignored():
    """The raw runs of issues 25 and 31 were lost because .gitignore's ``runs/`` matched every folder
    named runs, docs/bench/**/runs/ included: git must not ignore a run folder there."""
    import subprocess
    probe = "docs/bench/accuracy/five/full/runs/P4/fixed/sync/seed3/summary.json"
    r = subprocess.run(["git", "check-ignore", "-v", probe], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 1, f"git ignores {probe}: {r.stdout.strip()} (ignore /runs/, the top folder, only)"


def test_a_rerun_that_differs_from_its_study_record_stops_the_gap_tables(clean_checkout, tmp_path):
    """The gap tables are built from the studies' records (raw runs lost); the runs made again
    and committed must equal those records, or the script stops rather than print the table."""
    import subprocess
    copy = tmp_path / "clean"
    shutil.copytree(clean_checkout, copy)
    summaries = sorted((copy / "docs/bench/accuracy/gaps/mini/runs").glob("P8/fixed/*/seed*/summary.json"))
    assert summaries, "no committed rerun of the gap study"
    s = json.loads(summaries[0].read_text())
    s["val_accuracy"] += 0.001
    summaries[0].write_text(json.dumps(s))
    r = subprocess.run([sys.executable, str(copy / "scripts" / "gap_tables.py"), "--check"], cwd=copy,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "differs from the study's record of it" in r.stderr, r.stderr[-1000:]
