"""Issue 43's verdict table: a candidate against synchronous SGD on fresh seeds, paired by seed.

Reads the raw runs of stability-map configurations (each run's ``summary.json`` and
``command.txt`` under ``RAW/P{P}/lr{lr}/{rule}/seed{s}/``, as scripts/stability_map.py copies them),
and prints, per P and learning rate, each seed's validation accuracy of both rules and the
difference candidate - sync with its 95 % interval over the seeds that both trained
(:func:`minips.stats.compare_with_baseline`), the issue's target (the candidate within half a point
of sync: ``met`` when the whole interval is above -0.5 points, ``missed`` when it is below) and the
runs left out (diverged: a non-finite loss; collapsed: below chance). Validation, not test, decides.

    python scripts/verdict_43.py            # writes docs/bench/scale/screen-43/correction05-verdict/verdict.md
    python scripts/verdict_43.py --check    # exit 1 when the committed table differs from the raw runs'
    python scripts/verdict_43.py --raw DIR [--raw DIR2] --candidate RULE --out FILE.md    # another candidate's

(tests/test_tables_rebuild.py rebuilds the committed table in a clean copy.)
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from stability_map import read_raw  # noqa: E402

from minips.stats import compare_with_baseline, fmt_diff, fmt_target  # noqa: E402

CHANCE = 0.11   # the map's: a run that ends below it collapsed


def _values(here: dict, rule: str) -> dict:
    """{seed: validation accuracy} of ``rule``'s runs in one cell; None for a failed run."""
    return {s: r["val"] if r["outcome"] == "trains" else None for (ru, s), r in here.items() if ru == rule}


def _shown(r: dict | None) -> str:
    if r is None:
        return "not run"
    if r["outcome"] == "trains":
        return f"{r['val']:.4f}"
    return f"div@{r['step']}" if r["outcome"] == "diverged" else f"chance ({r['val']:.3f})"


def table(raws: list[Path], candidate: str, baseline: str = "sync", within: float = 0.005) -> str:
    runs = {}
    for raw in raws:
        got = read_raw(raw, CHANCE)
        if not got:
            raise SystemExit(f"verdict_43.py: no runs under {raw} (expected P*/lr*/RULE/seed*/summary.json)")
        runs.update(got)
    shown_raws = ", ".join(f"`{r.relative_to(ROOT) if r.is_relative_to(ROOT) else r}`" for r in raws)
    cells = sorted({(c.P, c.lr) for c in runs})
    lines = [f"Validation accuracy per seed, `{candidate}` (A) against `{baseline}` (B), paired by seed; "
             f"A - B in points with its 95 % interval over the seeds both trained; target: A within "
             f"{100 * within:g} points of B ({shown_raws}).", "",
             "| P | lr | seeds | B per seed | A per seed | A - B | target |", "|---:|---:|---|---|---|---|---|"]
    for P, lr in cells:
        here = {(c.rule, c.seed): r for c, r in runs.items() if (c.P, c.lr) == (P, lr)}
        seeds = sorted({s for _, s in here})
        a, b = _values(here, candidate), _values(here, baseline)
        d = compare_with_baseline(a, b, within=within, chance=CHANCE) if a and b else None
        shown_b = " / ".join(_shown(here.get((baseline, s))) for s in seeds)
        shown_a = " / ".join(_shown(here.get((candidate, s))) for s in seeds)
        lines.append(f"| {P} | {lr:g} | {', '.join(map(str, seeds))} | {shown_b} | {shown_a} "
                     f"| {fmt_diff(d, a=a, chance=CHANCE)} | {fmt_target(d)} |")
    return "\n".join(lines) + "\n"


#: the committed verdict: lambda 0.5 as local's option (docs/accuracy.md section 11.3), P = 16 and 64, and P = 32
RAWS = [ROOT / "docs/bench/scale/screen-43/correction05-verdict",
        ROOT / "docs/bench/scale/screen-43/correction05-verdict-p32"]
CANDIDATE = "pseudo-sync:local:1:correction_weight=0.5"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--raw", type=Path, action="append", help="a raw folder of a stability-map configuration "
                    "(repeat for several; default: the committed verdict's two)")
    ap.add_argument("--candidate", default=CANDIDATE, help="the candidate's rule, as in the configuration's rules")
    ap.add_argument("--baseline", default="sync", help="the rule it is judged against (default sync)")
    ap.add_argument("--out", type=Path, help="the table's file (default: verdict.md in the raw folder)")
    ap.add_argument("--check", action="store_true", help="compare with the committed table; exit 1 when it differs")
    args = ap.parse_args(argv)
    raws = [r.resolve() for r in (args.raw or RAWS)]
    out = table(raws, args.candidate, args.baseline)
    path = args.out or raws[0] / "verdict.md"
    if args.check:
        if not path.exists() or path.read_text() != out:
            print(f"verdict_43.py: {path} differs from what the raw runs give; rebuild it", file=sys.stderr)
            return 1
        return 0
    path.write_text(out)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
