"""What `adaptive-local` learns at 16-128 ranks (issue 43: before a pooled correction weight is
built, why the rule that learns one fails there): the weight lambda its regression learns in
every stability-map run of `pseudo-sync:adaptive-local:1`, and the loss spikes of every map run of
it, of sync and of `local` (the control), read from the runs' per-step traces.

Inputs, all committed: the runs listed in docs/bench/scale/screen-43/adaptive-local-lambda/runs.txt
(every map run of those three rules at commit 3b77020; the map grows, this table does not), each
one's summary.json under docs/bench/scale/map/P{P}/lr{lr}/{rule}/seed{s}/ and one trace, copied from
the map driver's run folder to docs/bench/scale/screen-43/adaptive-local-lambda/traces/ under the
same relative path: ``trace.csv`` for a run that finished (rank 0's loss and lambda per step), else
the lowest rank's ``trace-diverged-rank{r}.csv`` (lambda is pooled: the same on every rank). A
listed run without its summary or its trace stops the script with a one-line error.

Per `adaptive-local` run: the step at which lambda first leaves its start value ``lambda0`` (the
end of the rule's own warm-up of ``warmup`` pooled samples), the learning rate then, lambda's
value there beside 1/P, its median over the later steps, the largest stable h * lr of the ranks'
mean loop at that lambda (noise-free quadratic model, minips.labs.stability; synchronous SGD:
1.357), the first later step whose loss exceeds SPIKE_LOSS or is not finite, and the outcome.
Per rule: how many runs have such a spike after step SPIKE_FROM (the step lambda leaves 1 in
every `adaptive-local` run), among all and among those that trained. Writes table.md and
table.json beside the traces:

    python scripts/adaptive_local_lambda.py            # print and write the tables
    python scripts/adaptive_local_lambda.py --check    # writes nothing; exit 1 if they differ
"""
from __future__ import annotations

import csv
import json
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from raw_runs import check_or_write  # noqa: E402
from stability_map import diverged_step, outcome, run_text  # noqa: E402

HERE = ROOT / "docs" / "bench" / "scale" / "screen-43" / "adaptive-local-lambda"
TRACES = HERE / "traces"
LISTED = HERE / "runs.txt"
MAP = ROOT / "docs" / "bench" / "scale" / "map"
RULES = {"sync": "sync", "pseudo-sync-local-1": "local (default)", "pseudo-sync-adaptive-local-1": "adaptive-local"}
LEARNT = "pseudo-sync-adaptive-local-1"
SPIKE_LOSS = 3.0    # chance is ln 10 = 2.30 for 10 classes
SPIKE_FROM = 13     # the first step at which the learnt lambda differs from lambda0 in every map run
CHANCE = 0.11       # the map's collapse line (configs/stability-map.toml)


def _fail(msg: str):
    raise SystemExit(f"adaptive_local_lambda.py: {msg}")


def _trace(rel: str, columns: tuple[str, ...]) -> tuple[Path, list[dict]]:
    """The run's one trace (finished: trace.csv; diverged: the lowest rank's) and its rows, which
    must have ``columns``."""
    folder = TRACES / rel
    found = sorted(folder.glob("trace.csv")) or sorted(folder.glob("trace-diverged-rank*.csv"),
                                                       key=lambda p: int(p.stem.removeprefix("trace-diverged-rank")))
    if not found:
        _fail(f"no trace for the map run {rel}: copy its run folder's trace.csv (or trace-diverged-rank*.csv) "
              f"to {folder.relative_to(ROOT)}/")
    rows = list(csv.DictReader(found[0].open()))
    for col in columns:
        if rows and col not in rows[0]:
            _fail(f"{found[0].relative_to(ROOT)} has no column {col!r}: not a trace of minips train")
    return found[0], rows


def _spike(rows: list[dict], after: int) -> int | None:
    """The first step > ``after`` whose loss exceeds SPIKE_LOSS or is not finite (NaN counts)."""
    return next((int(r["step"]) for r in rows if int(r["step"]) > after
                 and not (float(r["loss"]) <= SPIKE_LOSS)), None)


def runs() -> list[dict]:
    """One record per listed map run of the three rules, sorted by rule, P, lr, seed; the
    `adaptive-local` ones with the learnt lambda (dimensionless), the learning rate at its first
    move (per step) and the mean loop's limit (h * lr). Raises SystemExit when a listed run's
    summary or trace is missing or lambda never leaves lambda0."""
    from minips.labs.stability import largest_stable_steps
    out = []
    listed = [line.strip() for line in LISTED.read_text().splitlines() if line.strip() and not line.startswith("#")]
    for rel in listed:
        m = re.fullmatch(r"P(\d+)/lr([0-9.]+)/([^/]+)/seed(\d+)", rel)
        if not m or m[3] not in RULES:
            _fail(f"{LISTED.relative_to(ROOT)}: {rel!r} is not P{{P}}/lr{{lr}}/{{rule}}/seed{{s}} of "
                  f"{', '.join(RULES)}")
        summary_path = MAP / rel / "summary.json"
        if not summary_path.is_file():
            _fail(f"{summary_path.relative_to(ROOT)} is missing: {LISTED.name} lists a run the map does not have")
        summary = json.loads(summary_path.read_text())
        path, rows = _trace(rel, ("step", "loss", "lr", "lambda") if m[3] == LEARNT else ("step", "loss"))
        o = outcome(summary, CHANCE)
        text = run_text({"outcome": o, "val": summary.get("val_accuracy"),
                         "step": diverged_step(summary) if o == "diverged" else None})  # as the map prints it
        rec = {"rule": RULES[m[3]], "P": int(m[1]), "lr": float(m[2]), "seed": int(m[4]),
               "outcome": text, "trains": o == "trains", "trace": path.name,
               "spike_step": _spike(rows, SPIKE_FROM - 1)}
        if m[3] == LEARNT:
            lam = [(int(r["step"]), float(r["lambda"])) for r in rows if r["lambda"]]
            lam0 = lam[0][1]   # the rule's lambda0, held until its warm-up ends
            first = next((i for i, (_, v) in enumerate(lam) if v != lam0), None)
            if first is None:
                _fail(f"{path.relative_to(ROOT)}: lambda never leaves lambda0 = {lam0} (a run shorter than "
                      f"the rule's warm-up?)")
            step0, lam_first = lam[first]
            rec.update({"first_learnt_step": step0,
                        "lr_at_that_step": next(float(r["lr"]) for r in rows if int(r["step"]) == step0),
                        "first_lambda": lam_first, "first_lambda_times_P": lam_first * int(m[1]),
                        "median_lambda_later": statistics.median(v for _, v in lam[first + 1:])
                        if first + 1 < len(lam) else None,
                        "mean_loop_limit_at_first_lambda": largest_stable_steps(lam=lam_first)["weighted_mean"],
                        "spike_after_first_learnt_step": _spike(rows, step0)})
        out.append(rec)
    if not any(r["rule"] == RULES[LEARNT] for r in out):
        _fail(f"{LISTED.relative_to(ROOT)} lists no run of {LEARNT}")
    return sorted(out, key=lambda r: (list(RULES.values()).index(r["rule"]), r["P"], r["lr"], r["seed"]))


def table(rows: list[dict]) -> str:
    """The two markdown tables: every `adaptive-local` run, then the spikes per rule."""
    from minips.labs.stability import largest_stable_steps
    sync = largest_stable_steps()["synchronous"]
    fmt = lambda x, f: "-" if x is None else format(x, f)  # noqa: E731
    out = ["Every stability-map run of `pseudo-sync:adaptive-local:1`: the lambda its regression learns "
           "(pooled: the same on every rank) and the ranks' mean loop's largest stable h * lr at that lambda "
           f"(noise-free quadratic model, k = 1, Nesterov 0.9; synchronous SGD: {sync:.3f}); a spike is a "
           f"loss above {SPIKE_LOSS:g} or not finite (chance: 2.30), from the run's trace.", "",
           "| P | lr | seed | lambda leaves 1 at step (lr then) | lambda there | x P | median lambda later "
           "| mean loop's limit there | first later spike | outcome (val accuracy) |",
           "|---:|---:|---:|---|---:|---:|---:|---:|---:|---|"]
    for r in (r for r in rows if r["rule"] == RULES[LEARNT]):
        out.append(f"| {r['P']} | {r['lr']:g} | {r['seed']} | {r['first_learnt_step']} ({r['lr_at_that_step']:.3f}) "
                   f"| {r['first_lambda']:.4f} | {r['first_lambda_times_P']:.2f} "
                   f"| {fmt(r['median_lambda_later'], '.3f')} | {r['mean_loop_limit_at_first_lambda']:.3f} "
                   f"| {fmt(r['spike_after_first_learnt_step'], 'd')} | {r['outcome']} |")
    out += ["", f"Spikes after step {SPIKE_FROM - 1} in every map run of the three rules (a diverged run's loss "
                f"grows past {SPIKE_LOSS:g} before it stops, so it counts):", "",
            "| rule | runs | with a spike | runs that trained | of those, with a spike |",
            "|---|---:|---:|---:|---:|"]
    for rule in RULES.values():
        rr = [r for r in rows if r["rule"] == rule]
        ok = [r for r in rr if r["trains"]]
        out.append(f"| `{rule}` | {len(rr)} | {sum(r['spike_step'] is not None for r in rr)} | {len(ok)} "
                   f"| {sum(r['spike_step'] is not None for r in ok)} |")
    return "\n".join(out)


def main(argv: list[str]) -> int:
    """Print and write table.md and table.json; ``--check``: write nothing, return 1 if they differ."""
    rows = runs()
    md = table(rows)
    if "--check" not in argv:
        print(md)
    return check_or_write({HERE / "table.md": md + "\n", HERE / "table.json": json.dumps(rows, indent=1) + "\n"},
                          "--check" in argv)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
