"""Issue 31's tables (docs/accuracy.md section 8): each fix of ``local`` against
``local`` and sync, paired by seed, from the committed raw runs only:

- stage 1, mini set, P = 8, k = 1, seeds 0-4: ``local-rewind`` and ``layerwise-local``
  from docs/bench/accuracy/gaps/mini/study-gaps.json (sync, local and both fixes run on
  one commit); ``local`` with ``sync_warmup=20`` from
  docs/bench/accuracy/gaps/warmup/ (its run folders; local rerun there, bitwise equal to
  study-gaps' local) with sync from study-gaps.json;
- stage 2, full Fashion-MNIST, P = 8, k = 1, seeds 0-2: local and local-rewind from
  docs/bench/accuracy/gaps/full/runs/ (one commit), sync from issue 12's run folders
  docs/bench/accuracy/full/P8/sync/;
- stage 2, the captioner, P = 2, k = 1, seeds 0-2: sync, local and local-rewind from
  docs/bench/accuracy/gaps/captioner/runs/ (one commit).

Per rule: the per-seed values, mean and 95 % t interval over seeds; the per-seed
difference against ``local`` and against sync, its mean and 95 % t interval, better /
worse / tie (minips.stats). Validation decides; test is reported. The stopping rule of
stage 1: a fix goes on when its interval against ``local`` on validation is better, or a
tie with a higher mean.

    python scripts/gap_tables.py        # prints the tables, writes gaps/tables.md and .json
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from minips.stats import compare_with_baseline, fmt_diff, t_interval  # noqa: E402

ACC = ROOT / "docs" / "bench" / "accuracy"
GAPS = ACC / "gaps"
LOCAL = "pseudo-sync:local:1"


def _safe(lab: str) -> str:
    return lab.replace(":", "-").replace("@", "_")


def study(path: Path, labels) -> dict:
    """{label: {seed: (val, test)}} from a bench study JSON (metric, reported)."""
    out: dict = {}
    for r in json.loads(path.read_text())["runs"]:
        if r["label"] in labels and r.get("status") == "ok":
            out.setdefault(r["label"], {})[r["seed"]] = (r["metric"], r["reported"])
    return out


def folders(root: Path, labels, val_key: str, test_key: str) -> dict:
    """{label: {seed: (val, test)}} from ``root/**/<safe label>/seed<S>/summary.json``."""
    by_safe = {_safe(lab): lab for lab in labels}
    out: dict = {}
    for f in sorted(root.rglob("summary.json")):
        lab = by_safe.get(f.parent.parent.name)
        if lab is None or not f.parent.name.startswith("seed"):
            continue
        s = json.loads(f.read_text())
        if s.get("status") == "diverged":
            continue
        out.setdefault(lab, {})[int(f.parent.name[4:])] = (s[val_key], s[test_key])
    return out


def table(title: str, runs: dict, fixes, scale: float, digits: int, stage1: bool) -> tuple[str, list]:
    unit = "BLEU-4" if scale == 1 else "accuracy"
    head = ("| rule | seeds | val per seed | val | val minus local | val minus sync | test | test minus local "
            "| test minus sync |" + (" stopping rule (val against local) |" if stage1 else ""))
    lines = [f"### {title}", "",
             f"Mean ± 95 % t interval over seeds ({unit}); differences in points, 95 % t interval of the "
             "per-seed difference (paired by seed): **better** / **worse** when it excludes 0, else **tie**. "
             "Validation decides; test is reported.", "", head,
             "|" + "---|" * (head.count("|") - 1)]
    rows = []
    val = {lab: {s: v for s, (v, _) in d.items()} for lab, d in runs.items()}
    test = {lab: {s: t for s, (_, t) in d.items()} for lab, d in runs.items()}
    for lab in ["sync", LOCAL, *fixes]:
        if lab not in runs:
            continue
        seeds = sorted(runs[lab])
        v, t = t_interval(list(val[lab].values())), t_interval(list(test[lab].values()))
        per = " / ".join(f"{val[lab][s]:.{digits}f}" for s in seeds)
        row = {"setting": title, "label": lab, "seeds": seeds, "val_per_seed": [val[lab][s] for s in seeds],
               "test_per_seed": [test[lab][s] for s in seeds], "val": v.__dict__, "test": t.__dict__}
        cells = [f"`{lab}`", str(len(seeds)), per, v.fmt(digits), "", "", t.fmt(digits), "", ""]
        if lab != "sync" and "sync" in runs:
            row["val_vs_sync"] = compare_with_baseline(val[lab], val["sync"])
            row["test_vs_sync"] = compare_with_baseline(test[lab], test["sync"])
            cells[5], cells[8] = fmt_diff(row["val_vs_sync"], scale), fmt_diff(row["test_vs_sync"], scale)
        if lab not in ("sync", LOCAL):
            row["val_vs_local"] = dv = compare_with_baseline(val[lab], val[LOCAL])
            row["test_vs_local"] = compare_with_baseline(test[lab], test[LOCAL])
            cells[4], cells[7] = fmt_diff(dv, scale), fmt_diff(row["test_vs_local"], scale)
            if stage1:
                goes = dv["verdict"] == "better" or (dv["verdict"] == "tie" and dv["mean"] > 0)
                row["goes_on"] = goes
                cells.append("goes on (" + ("better" if dv["verdict"] == "better" else "tie, higher mean") + ")"
                             if goes else "stops (" + (dv["verdict"] if dv["verdict"] != "tie"
                                                       else "tie, lower mean") + ")")
        elif stage1:
            cells.append("")
        lines.append("| " + " | ".join(cells) + " |")
        rows.append(row)
    return "\n".join(lines) + "\n", rows


def main() -> int:
    rewind, layer, warm = "pseudo-sync:local-rewind:1", "pseudo-sync:layerwise-local:1", \
        "pseudo-sync:local:1:sync_warmup=20"
    mini = study(GAPS / "mini" / "study-gaps.json", {"sync", LOCAL, rewind, layer})
    warmup = {"sync": mini["sync"], **folders(GAPS / "warmup" / "runs", [LOCAL, warm], "val_accuracy",
                                              "test_accuracy")}
    full = {**folders(ACC / "full" / "P8", ["sync"], "val_accuracy", "test_accuracy"),
            **folders(GAPS / "full" / "runs", [LOCAL, rewind], "val_accuracy", "test_accuracy")}
    full["sync"] = {s: v for s, v in full.get("sync", {}).items() if s in full.get(LOCAL, {})}
    cap = folders(GAPS / "captioner" / "runs", ["sync", LOCAL, rewind], "val_bleu", "bleu")
    md = ["# Issue 31: each fix of `local` against `local` and sync, paired by seed", "",
          "Made by `python scripts/gap_tables.py` from the raw runs named in its docstring.", ""]
    out = []
    for title, runs, fixes, scale, digits, stage1 in (
            ("Stage 1: mini set, P = 8, k = 1 (local-rewind, layerwise-local)", mini, [rewind, layer], 100.0, 4,
             True),
            ("Stage 1: mini set, P = 8, k = 1 (sync_warmup = 20)", warmup, [warm], 100.0, 4, True),
            ("Stage 2: full Fashion-MNIST, P = 8, k = 1", full, [rewind], 100.0, 4, False),
            ("Stage 2: the captioner (BLEU-4), P = 2, k = 1", cap, [rewind], 1.0, 2, False)):
        if LOCAL not in runs:
            md.append(f"### {title}\n\n(no runs committed yet)\n")
            continue
        text, rows = table(title, runs, fixes, scale, digits, stage1)
        md.append(text)
        out += rows
    text = "\n".join(md)
    print(text)
    (GAPS / "tables.md").write_text(text)
    (GAPS / "tables.json").write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
