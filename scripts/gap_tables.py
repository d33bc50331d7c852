"""Issue 31's tables (docs/accuracy.md section 8): each fix of ``local`` against
``local`` and sync, paired by seed, from committed files only; a section whose run folders
were lost is built from the study's own per-run records and says so (**raw runs lost**):

- stage 1, mini set, P = 8, k = 1, seeds 0-4: sync, ``local``, ``local-rewind`` and
  ``layerwise-local``, one commit (4eaed74): docs/bench/accuracy/gaps/mini/runs/ (made again
  by issue 41; every run must be there, or the script stops and names the first missing one);
  ``local`` and ``local`` with ``sync_warmup=20``, one commit (a152dc0):
  gaps/warmup/runs/ (made again by issue 41), with sync from gaps/mini/runs/. Every run
  committed under gaps/mini/runs/ and gaps/warmup/runs/ must give the value its study recorded
  (study-gaps.json, study-gaps-warmup.json), or the script stops;
- stage 2, full Fashion-MNIST, P = 8, k = 1, seeds 0-2: sync and ``local`` from issue 12's run
  folders docs/bench/accuracy/full/P8/ (commit 24626ca; ``local`` there is bitwise the run
  3fe596b made, gaps/full/load.txt); every one of them must be there, or the script stops and
  names the first missing one; ``local-rewind`` (commit 3fe596b): raw runs lost, from
  gaps/full/study-gaps-full.json;
- stage 2, the captioner, P = 2, k = 1, seeds 0-2: sync, ``local`` and ``local-rewind``
  (commit a152dc0): raw runs lost, from gaps/captioner/study-gaps-captioner.json.

docs/bench/accuracy/gaps/README.md says how the runs were made and checked.

Per rule: the per-seed values, mean and 95 % t interval over seeds; the per-seed
difference against ``local`` and against sync, its mean and 95 % t interval, better /
worse / no difference shown (minips.stats; diverged runs and runs that ended at chance are
left out and counted). Validation decides; test is reported. The stopping rule of stage 1:
a fix goes on when its interval against ``local`` on validation is better, or shows no
difference with a higher mean.

    python scripts/gap_tables.py            # prints the tables, writes gaps/tables.md and .json
    python scripts/gap_tables.py --check    # writes nothing; exit 1 if they differ from the committed ones
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from minips.stats import NO_DIFFERENCE, compare_with_baseline, fmt_diff, fmt_over_seeds  # noqa: E402
from raw_runs import check_or_write, load, safe, value  # noqa: E402

ACC = ROOT / "docs" / "bench" / "accuracy"
GAPS = ACC / "gaps"
LOCAL = "pseudo-sync:local:1"
REWIND, LAYER, WARM = "pseudo-sync:local-rewind:1", "pseudo-sync:layerwise-local:1", \
    "pseudo-sync:local:1:sync_warmup=20"
CHANCE = 0.1


def study_folders(root: Path, P: int, labels, seeds) -> dict:
    """``{(label, seed): folder}`` of a ``bench study``'s runs copied under ``root``."""
    return {(lab, s): root / f"P{P}" / "fixed" / safe(lab) / f"seed{s}" for lab in labels for s in seeds}


def from_folders(folders: dict, val_key: str, test_key: str) -> tuple[dict, dict]:
    runs = load(folders, "gap_tables.py")
    val, test = {}, {}
    for (lab, s), summary in runs.items():
        val.setdefault(lab, {})[s] = value(summary, val_key)
        test.setdefault(lab, {})[s] = value(summary, test_key)
    return val, test


def from_study_json(path: Path, labels, seeds=None) -> tuple[dict, dict]:
    """A section whose raw runs were lost: the study's own per-run records (metric, reported).

    Raises:
        SystemExit: the record lacks a run (label, seed) the section needs.
    """
    val, test = {}, {}
    for r in json.loads(path.read_text())["runs"]:
        if r["label"] in labels:
            ok = r.get("status") == "ok"
            val.setdefault(r["label"], {})[r["seed"]] = r["metric"] if ok else None
            test.setdefault(r["label"], {})[r["seed"]] = r["reported"] if ok else None
    want = [(lab, s) for lab in labels for s in (seeds if seeds is not None else range(3))]
    gone = [w for w in want if w[1] not in val.get(w[0], {})]
    if gone:
        raise SystemExit(f"gap_tables.py: {path.relative_to(ROOT)} has no record of {len(gone)} run(s) the table "
                         f"needs (first: {gone[0][0]} seed {gone[0][1]}); a table is never built from fewer runs")
    return val, test


def check_reruns(root: Path, val: dict, test: dict) -> int:
    """Every run folder committed under ``root`` (a rerun of a lost run, on the commit that made it)
    must give the value the study recorded for that run, val and test; returns how many there are.

    Raises:
        SystemExit: a committed run that differs from the record, or that the record does not hold.
    """
    n = 0
    for summary in sorted(root.glob("P8/fixed/*/seed*/summary.json")):
        s = json.loads(summary.read_text())
        seed = int(summary.parent.name[4:])
        lab = next((k for k in val if safe(k) == summary.parent.parent.name), None)
        if lab is None or seed not in val[lab]:
            raise SystemExit(f"gap_tables.py: {summary.relative_to(ROOT)} is not in the study's record")
        if (s.get("val_accuracy"), s.get("test_accuracy")) != (val[lab][seed], test[lab][seed]):
            raise SystemExit(f"gap_tables.py: {summary.relative_to(ROOT)} differs from the study's record of it")
        n += 1
    return n


def table(title: str, source: str, val: dict, test: dict, fixes, scale: float, digits: int,
          stage1: bool) -> tuple[str, list]:
    unit = "BLEU-4" if scale == 1 else "accuracy"
    chance = CHANCE if scale == 100.0 else None
    head = ("| rule | seeds | val per seed | val | val minus local | val minus sync | test | test minus local "
            "| test minus sync |" + (" stopping rule (val against local) |" if stage1 else ""))
    lines = [f"### {title}", "", f"{source} Mean ± 95 % t interval over seeds ({unit}); differences in points, "
             "95 % t interval of the per-seed difference (paired by seed): **better** / **worse** when it excludes "
             f"0, else **{NO_DIFFERENCE}** (the interval holds 0: not parity). Validation decides; test is "
             "reported.", "", head, "|" + "---|" * (head.count("|") - 1)]
    rows = []
    for lab in ["sync", LOCAL, *fixes]:
        seeds = sorted(val[lab])
        per = " / ".join(f"{v:.{digits}f}" if isinstance(v, float) else "diverged" for v in
                         (val[lab][s] for s in seeds))
        row = {"setting": title, "label": lab, "seeds": seeds, "val_per_seed": [val[lab][s] for s in seeds],
               "test_per_seed": [test[lab][s] for s in seeds]}
        cells = [f"`{lab}`", str(len(seeds)), per, fmt_over_seeds(val[lab], chance, digits), "", "",
                 fmt_over_seeds(test[lab], chance, digits), "", ""]
        if lab != "sync":
            row["val_vs_sync"] = compare_with_baseline(val[lab], val["sync"], chance=chance)
            row["test_vs_sync"] = compare_with_baseline(test[lab], test["sync"], chance=chance)
            cells[5], cells[8] = fmt_diff(row["val_vs_sync"], scale), fmt_diff(row["test_vs_sync"], scale)
        if lab not in ("sync", LOCAL):
            row["val_vs_local"] = dv = compare_with_baseline(val[lab], val[LOCAL], chance=chance)
            row["test_vs_local"] = compare_with_baseline(test[lab], test[LOCAL], chance=chance)
            cells[4], cells[7] = fmt_diff(dv, scale), fmt_diff(row["test_vs_local"], scale)
            if stage1:
                goes = dv["verdict"] == "better" or (dv["verdict"] == NO_DIFFERENCE and dv["mean"] > 0)
                row["goes_on"] = goes
                if goes:
                    cells.append("goes on (" + ("better" if dv["verdict"] == "better"
                                                else f"{NO_DIFFERENCE}, higher mean") + ")")
                else:
                    cells.append("stops (" + (dv["verdict"] if dv["verdict"] != NO_DIFFERENCE
                                              else f"{NO_DIFFERENCE}, lower mean") + ")")
        elif stage1:
            cells.append("")
        lines.append("| " + " | ".join(cells) + " |")
        rows.append(row)
    return "\n".join(lines) + "\n", rows


def build() -> tuple[str, str]:
    """The tables' markdown and JSON text, from the committed runs."""
    seeds3 = range(3)
    mini_v, mini_t = from_folders(study_folders(GAPS / "mini" / "runs", 8, ["sync", LOCAL, REWIND, LAYER], range(5)),
                                  "val_accuracy", "test_accuracy")
    rec_v, rec_t = from_study_json(GAPS / "mini" / "study-gaps.json", ["sync", LOCAL, REWIND, LAYER], range(5))
    warm_v, warm_t = from_folders(study_folders(GAPS / "warmup" / "runs", 8, [LOCAL, WARM], range(5)),
                                  "val_accuracy", "test_accuracy")
    wrec_v, wrec_t = from_study_json(GAPS / "warmup" / "study-gaps-warmup.json", [LOCAL, WARM], range(5))
    check_reruns(GAPS / "mini" / "runs", rec_v, rec_t)  # the runs made again equal issue 31's record of them
    check_reruns(GAPS / "warmup" / "runs", wrec_v, wrec_t)
    full_folders = {**{("sync", s): ACC / "full" / "P8" / "sync" / f"seed{s}" for s in seeds3},
                    **{(LOCAL, s): ACC / "full" / "P8" / safe(LOCAL) / f"seed{s}" for s in seeds3}}
    full_v, full_t = from_folders(full_folders, "val_accuracy", "test_accuracy")
    rew_v, rew_t = from_study_json(GAPS / "full" / "study-gaps-full.json", [REWIND])
    full_v, full_t = {**full_v, **rew_v}, {**full_t, **rew_t}
    cap_v, cap_t = from_study_json(GAPS / "captioner" / "study-gaps-captioner.json", ["sync", LOCAL, REWIND])
    md = ["# Issue 31: each fix of `local` against `local` and sync, paired by seed", "",
          "Made by `python scripts/gap_tables.py` from the committed raw runs named in each section (how they were "
          "made and checked: `README.md` in this folder).", ""]
    out = []
    for title, source, val, test, fixes, scale, digits, stage1 in (
            ("Stage 1: mini set, P = 8, k = 1 (local-rewind, layerwise-local)",
             "Raw runs: `gaps/mini/runs/` (commit 4eaed74). Issue 31 kept only the study's per-run records "
             "(`gaps/mini/study-gaps.json`); issue 41 made all 20 runs again on that commit, each equal to its "
             "record bit for bit (`gaps/mini/rerun-check.txt`; this script checks the values).",
             mini_v, mini_t, [REWIND, LAYER], 100.0, 4, True),
            ("Stage 1: mini set, P = 8, k = 1 (sync_warmup = 20)",
             "Raw runs: `gaps/warmup/runs/` (commit a152dc0); sync from `gaps/mini/runs/` (commit 4eaed74). Issue "
             "31 kept only the study's per-run records (`gaps/warmup/study-gaps-warmup.json`); issue 41 made its 10 "
             "runs again on that commit, each equal to its record bit for bit (`gaps/warmup/rerun-check.txt`).",
             {"sync": mini_v["sync"], **warm_v}, {"sync": mini_t["sync"], **warm_t}, [WARM], 100.0, 4, True),
            ("Stage 2: full Fashion-MNIST, P = 8, k = 1",
             "Raw runs: sync and local from `full/P8/` (commit 24626ca). **Raw runs lost** for local-rewind "
             "(commit 3fe596b): its values are the study's own per-run records (`gaps/full/study-gaps-full.json`; "
             "log `gaps/full/study.log`); its run folders were not kept and were not rerun (8 minutes a run).",
             full_v, full_t, [REWIND], 100.0, 4, False),
            ("Stage 2: the captioner (BLEU-4), P = 2, k = 1",
             "**Raw runs lost**: the values are the study's own per-run records "
             "(`gaps/captioner/study-gaps-captioner.json`, commit a152dc0; log `gaps/captioner/study.log`); their "
             "run folders were not kept and were not rerun.", cap_v, cap_t, [REWIND], 1.0, 2, False)):
        text, rows = table(title, source, val, test, fixes, scale, digits, stage1)
        md.append(text)
        out += rows
    return "\n".join(md), json.dumps(out, indent=1, default=lambda f: f.why) + "\n"


def main(argv: list[str]) -> int:
    text, js = build()
    if "--check" not in argv:
        print(text)
    return check_or_write({GAPS / "tables.md": text, GAPS / "tables.json": js}, "--check" in argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
