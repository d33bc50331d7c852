"""Why `adaptive-local` collapses at 16-128 ranks (issue 43: "find out why first"): the weight
lambda its regression learns, read from the per-step traces of the stability map's runs.

Reads, for every map run of `pseudo-sync:adaptive-local:1` whose trace was kept,
docs/bench/scale/screen-43/adaptive-local-lambda/P{P}/lr{lr}/seed{s}/trace.csv (the run's own
trace.csv: rank 0's loss and lambda per step, copied from the map driver's run folder) and the
run's summary.json in docs/bench/scale/map/. Per run it gives the step at which lambda first
leaves its start value 1 (the end of the rule's warm-up), the value it takes there beside 1/P,
its median over the rest of the run, the largest stable h * lr of the ranks' mean loop at that
lambda (noise-free quadratic model, minips.labs.stability; synchronous SGD: 1.357), the first
later step whose loss exceeds 3 (chance is ln 10 = 2.30), and the run's final validation
accuracy. Writes table.md and table.json beside the traces:

    python scripts/adaptive_local_lambda.py            # print and write the table
    python scripts/adaptive_local_lambda.py --check    # writes nothing; exit 1 if it differs
"""
from __future__ import annotations

import csv
import json
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from raw_runs import check_or_write  # noqa: E402

TRACES = ROOT / "docs" / "bench" / "scale" / "screen-43" / "adaptive-local-lambda"
MAP = ROOT / "docs" / "bench" / "scale" / "map"
RULE = "pseudo-sync-adaptive-local-1"
LOSS_SPIKE = 3.0


def runs() -> list[dict]:
    """One row per kept trace, sorted by P, lr, seed."""
    from minips.labs.stability import largest_stable_steps
    rows = []
    for trace in sorted(TRACES.glob("P*/lr*/seed*/trace.csv")):
        m = re.fullmatch(r"P(\d+)/lr([0-9.]+)/seed(\d+)", trace.parent.relative_to(TRACES).as_posix())
        P, lr, seed = int(m[1]), float(m[2]), int(m[3])
        summary_path = MAP / f"P{P}" / f"lr{m[2]}" / RULE / f"seed{seed}" / "summary.json"
        if not summary_path.exists():
            raise SystemExit(f"{summary_path.relative_to(ROOT)} is missing: the trace has no run in the map")
        summary = json.loads(summary_path.read_text())
        steps = list(csv.DictReader(trace.open()))
        lam = [(int(r["step"]), float(r["lambda"])) for r in steps if r["lambda"]]
        first = next(i for i, (_, v) in enumerate(lam) if v != 1.0)
        step0, lam0 = lam[first]
        spike = next((int(r["step"]) for r in steps if int(r["step"]) > step0 and float(r["loss"]) > LOSS_SPIKE),
                     None)
        lr_then = next(float(r["lr"]) for r in steps if int(r["step"]) == step0)
        rows.append({"P": P, "lr": lr, "seed": seed, "first_learnt_step": step0,
                     "lr_at_that_step": lr_then, "first_lambda": lam0,
                     "first_lambda_times_P": lam0 * P,
                     "median_lambda_after": statistics.median(v for _, v in lam[first:]),
                     "mean_loop_limit_at_first_lambda": largest_stable_steps(lam=lam0)["weighted_mean"],
                     "first_step_with_loss_above_3": spike,
                     "val_accuracy": summary["val_accuracy"]})
    return sorted(rows, key=lambda r: (r["P"], r["lr"], r["seed"]))


def table(rows: list[dict]) -> str:
    from minips.labs.stability import largest_stable_steps
    sync = largest_stable_steps()["synchronous"]
    out = ["`pseudo-sync:adaptive-local:1` in the stability map: the lambda its regression learns "
           f"(rank 0's trace). The ranks' mean loop's largest stable h * lr at that lambda, noise-free "
           f"quadratic model, k = 1, Nesterov 0.9 (synchronous SGD: {sync:.3f}).", "",
           "| P | lr | seed | lambda leaves 1 at step (lr then) | lambda there | x P | median lambda after "
           "| mean loop's limit there | first later step with loss > 3 | final val accuracy |",
           "|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {r['P']} | {r['lr']:g} | {r['seed']} | {r['first_learnt_step']} ({r['lr_at_that_step']:.3f}) "
                   f"| {r['first_lambda']:.4f} | {r['first_lambda_times_P']:.2f} | {r['median_lambda_after']:.3f} "
                   f"| {r['mean_loop_limit_at_first_lambda']:.3f} "
                   f"| {r['first_step_with_loss_above_3'] if r['first_step_with_loss_above_3'] is not None else '-'} "
                   f"| {r['val_accuracy']:.4f} |")
    return "\n".join(out)


def main(argv: list[str]) -> int:
    rows = runs()
    md = table(rows)
    if "--check" not in argv:
        print(md)
    return check_or_write({TRACES / "table.md": md + "\n", TRACES / "table.json": json.dumps(rows, indent=1) + "\n"},
                          "--check" in argv)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
