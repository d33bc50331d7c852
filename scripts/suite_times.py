"""Where the test suite's time goes: a table per file and the slowest tests.

Run the suite with the profiling plugin, then read its lines::

    python -m pytest -q -p tests.suite_profile --suite-profile runs/suite/prof.jsonl
    python scripts/suite_times.py runs/suite/prof.jsonl [--json runs/suite/times.json] [--top 20]

Under pytest-xdist every worker writes ``FILE.<worker>``: pass ``FILE`` and
they are all read. Prints, per test file: tests, wall seconds, CPU seconds of
the test processes and of their children (``mpiexec``, ``python -m minips``),
Numba compile seconds and processes launched; then the ``--top`` tests by wall
time and by CPU, and the totals. ``--json`` writes the same numbers. The raw
files and tables of the measurements quoted in docs/testing.md are in
docs/bench/test-suite/.
"""
from __future__ import annotations

import argparse
import collections
import glob
import json
import sys
from pathlib import Path


def read(path: str) -> list[dict]:
    """The plugin's records from ``path`` and ``path.<worker>`` files.

    Raises:
        SystemExit: no file, or a line that is not JSON (one line naming it).
    """
    files = sorted(p for p in glob.glob(path + "*") if p == path or p.startswith(path + "."))
    if not files:
        sys.exit(f"suite_times: no profile at {path}: run pytest with -p tests.suite_profile --suite-profile {path}")
    out = []
    for f in files:
        for n, line in enumerate(Path(f).read_text().splitlines(), 1):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                sys.exit(f"suite_times: {f} line {n} is not JSON (a run killed while writing?)")
    return out


def summarise(recs: list[dict]) -> dict:
    per = collections.defaultdict(lambda: collections.Counter())
    for r in recs:
        f = per[r["nodeid"].split("::")[0]]
        f["tests"] += 1
        for k in ("wall_s", "cpu_self_s", "cpu_children_s", "compile_s", "launches"):
            f[k] += r.get(k, 0)
    tot = collections.Counter()
    for f in per.values():
        tot.update(f)
    return {"files": {k: dict(v) for k, v in per.items()}, "total": dict(tot),
            "workers": sorted({r.get("worker", "main") for r in recs})}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("profile", help="the --suite-profile FILE given to pytest")
    ap.add_argument("--top", type=int, default=20, help="how many of the slowest tests to list (default 20)")
    ap.add_argument("--files", type=int, default=30, help="how many files to list (default 30)")
    ap.add_argument("--json", help="also write the summary here")
    a = ap.parse_args(argv)
    recs = read(a.profile)
    s = summarise(recs)
    print(f"{len(recs)} tests on {len(s['workers'])} worker(s): {', '.join(s['workers'])}")
    print(f"{'file':48s} {'tests':>5s} {'wall s':>8s} {'cpu s':>8s} {'child s':>8s} {'jit s':>6s} {'procs':>5s}")
    rows = sorted(s["files"].items(), key=lambda kv: -(kv[1]["cpu_self_s"] + kv[1]["cpu_children_s"]))
    for name, f in rows[:a.files]:
        print(f"{name:48s} {f['tests']:5d} {f['wall_s']:8.1f} {f['cpu_self_s']:8.1f} {f['cpu_children_s']:8.1f} "
              f"{f['compile_s']:6.1f} {f['launches']:5d}")
    t = s["total"]
    print(f"{'total':48s} {t['tests']:5d} {t['wall_s']:8.1f} {t['cpu_self_s']:8.1f} {t['cpu_children_s']:8.1f} "
          f"{t['compile_s']:6.1f} {t['launches']:5d}")
    print(f"\nthe {a.top} slowest tests (wall s, cpu s incl. children, processes launched):")
    for r in sorted(recs, key=lambda r: -r["wall_s"])[:a.top]:
        cpu = r["cpu_self_s"] + r["cpu_children_s"]
        print(f"{r['wall_s']:8.1f} {cpu:8.1f} {r.get('launches', 0):4d}  {r['nodeid']}")
    if a.json:
        s["slowest"] = sorted(recs, key=lambda r: -r["wall_s"])[:a.top]
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(s, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
