"""Issue 25's 5-seed tables (docs/accuracy.md section 7, docs/results.md section 4.1),
built from the committed raw runs only:

- mini set, seeds 0-2: the records of docs/bench/accuracy/study-accuracy.json (issue 12's
  study; its run folders were not kept); seeds 3-4: docs/bench/accuracy/five/mini/runs/;
- full Fashion-MNIST, seeds 0-2: docs/bench/accuracy/full/P4 and P8 (run folders);
  seeds 3-4: docs/bench/accuracy/five/full/runs/;
- captioner, seeds 0-1: docs/bench/accuracy/captioner/; seed 2: docs/bench/accuracy/five/captioner/runs/.

Per cell: mean and 95 % t interval over seeds; each rule against sync paired by seed
(better / worse / tie), on validation (which chooses) and test (reported); the target
"within X points of sync" on validation (met / missed / unresolved, with the seeds that would
resolve it); and `local` against AESP (`adaptive`) paired by seed. Statistics: minips.stats.

    python scripts/five_seed_tables.py            # prints the tables, writes five/tables.md and .json
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from minips.stats import compare_with_baseline, fmt_diff, fmt_target, t_interval  # noqa: E402

ACC = ROOT / "docs" / "bench" / "accuracy"
FIVE = ACC / "five"
RULES = ("sync", "adaptive", "local", "adaptive-local")


def label(rule: str, k: int) -> str:
    return "sync" if rule == "sync" else f"pseudo-sync:{rule}:{k}"


def _safe(lab: str) -> str:
    return lab.replace(":", "-").replace("@", "_")


def folder_records(root: Path, labels: list[str], val_key: str, test_key: str) -> list[dict]:
    """Every ``.../P{P}/.../{safe label}/seed{S}/summary.json`` under root (a study's
    runs/ folder or issue 12's P4/ P8/ layout); a diverged run (the study's
    {"status": "diverged"} record) has no values."""
    by_safe = {_safe(lab): lab for lab in labels}
    out = []
    for f in sorted(root.rglob("summary.json")):
        seed_dir, lab_dir = f.parent, f.parent.parent
        if not seed_dir.name.startswith("seed") or lab_dir.name not in by_safe:
            continue
        s = json.loads(f.read_text())
        ok = s.get("status") != "diverged"
        in_path = [int(p[1:]) for p in f.parts if p.startswith("P") and p[1:].isdigit()]
        P = s["world_size"] if ok else in_path[-1]  # a diverged run's record holds no world_size
        out.append({"P": P, "label": by_safe[lab_dir.name], "seed": int(seed_dir.name[4:]),
                    "val": s.get(val_key) if ok else None, "test": s.get(test_key) if ok else None,
                    "diverged": not ok, "source": str(f.relative_to(ROOT))})
    return out


def study_records(path: Path, labels: list[str]) -> list[dict]:
    """The records of a bench study JSON (metric = validation, reported = test)."""
    out = []
    for r in json.loads(path.read_text())["runs"]:
        if r["lr"] != "fixed" or r["label"] not in labels:
            continue
        ok = r.get("status") == "ok"
        out.append({"P": r["P"], "label": r["label"], "seed": r["seed"], "val": r.get("metric") if ok else None,
                    "test": r.get("reported") if ok else None, "diverged": r.get("status") == "diverged",
                    "source": str(path.relative_to(ROOT))})
    return out


def table(title: str, records: list[dict], ranks, k: int, within: float, scale: float, digits: int) -> tuple:
    """Markdown table and JSON rows for one setting."""
    unit = "BLEU-4" if scale == 1 else "accuracy"
    lines = [f"### {title}", "",
             f"Mean ± 95 % t interval over seeds ({unit}); differences in points, 95 % t interval of the per-seed "
             f"difference (paired by seed). Target: within {within:g} point{'' if within == 1 else 's'} of sync on "
             "validation.", "",
             "| P | rule | seeds | val | val minus sync | test | test minus sync | target (val) | "
             "local minus AESP (val; test) |", "|---|---|---|---|---|---|---|---|---|"]
    rows = []
    for P in ranks:
        cell = {rule: [r for r in records if r["P"] == P and r["label"] == label(rule, k)] for rule in RULES}
        vals = {rule: {r["seed"]: r["val"] for r in rs if r["val"] is not None} for rule, rs in cell.items()}
        tests = {rule: {r["seed"]: r["test"] for r in rs if r["test"] is not None} for rule, rs in cell.items()}
        for rule in RULES:
            rs = cell[rule]
            if not rs:
                continue
            div = sum(r["diverged"] for r in rs)
            v = t_interval(list(vals[rule].values())) if vals[rule] else None
            t = t_interval(list(tests[rule].values())) if tests[rule] else None
            row = {"setting": title, "P": P, "rule": rule, "label": label(rule, k),
                   "seeds": sorted(r["seed"] for r in rs), "diverged": div,
                   "val": None if v is None else v.__dict__, "test": None if t is None else t.__dict__}
            cells = [str(P), f"`{rule}`", f"{len(rs)}" + (f" ({div} diverged)" if div else ""),
                     "-" if v is None else v.fmt(digits), "", "-" if t is None else t.fmt(digits), "", "", ""]
            if rule != "sync":
                dv = compare_with_baseline(vals[rule], vals["sync"], within / scale)
                dt = compare_with_baseline(tests[rule], tests["sync"])
                row.update(val_vs_sync=dv, test_vs_sync=dt)
                cells[4], cells[6], cells[7] = fmt_diff(dv, scale), fmt_diff(dt, scale), fmt_target(dv)
            if rule == "local":
                lv = compare_with_baseline(vals["local"], vals["adaptive"])
                lt = compare_with_baseline(tests["local"], tests["adaptive"])
                row.update(local_vs_aesp_val=lv, local_vs_aesp_test=lt)
                cells[8] = f"{fmt_diff(lv, scale)}; {fmt_diff(lt, scale)}"
            lines.append("| " + " | ".join(cells) + " |")
            rows.append(row)
    return "\n".join(lines) + "\n", rows


def main() -> int:
    out, md = [], ["# Issue 25: the 5-seed tables", "",
                   "Made by `python scripts/five_seed_tables.py` from the raw runs named in its docstring.", ""]
    k1 = [label(r, 1) for r in RULES]
    k2 = [label(r, 2) for r in RULES]
    mini = (study_records(ACC / "study-accuracy.json", k1 + k2)
            + folder_records(FIVE / "mini" / "runs", k1 + k2, "val_accuracy", "test_accuracy"))
    full = (folder_records(ACC / "full", k1 + k2, "val_accuracy", "test_accuracy")
            + folder_records(FIVE / "full" / "runs", k1 + k2, "val_accuracy", "test_accuracy"))
    cap = (folder_records(ACC / "captioner", k1, "val_bleu", "bleu")
           + folder_records(FIVE / "captioner" / "runs", k1, "val_bleu", "bleu"))
    for title, recs, ranks, k, within, scale, digits in (
            ("mini set, k = 1", mini, (2, 4, 8), 1, 0.5, 100.0, 4),
            ("mini set, k = 2", mini, (4,), 2, 1.0, 100.0, 4),
            ("full Fashion-MNIST, k = 1", full, (4, 8), 1, 0.5, 100.0, 4),
            ("full Fashion-MNIST, k = 2", full, (4,), 2, 1.0, 100.0, 4),
            ("captioner (BLEU-4), k = 1", cap, (2,), 1, 1.0, 1.0, 2)):
        text, rows = table(title, recs, ranks, k, within, scale, digits)
        md.append(text)
        out += rows
    text = "\n".join(md)
    print(text)
    FIVE.mkdir(parents=True, exist_ok=True)
    (FIVE / "tables.md").write_text(text)
    (FIVE / "tables.json").write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
