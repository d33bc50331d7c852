"""The linearly scaled learning rate of the accuracy study, every run that finished, from
one or more study JSON files (``bench study`` writes them; later files add runs):

    python scripts/scaled_table.py docs/bench/accuracy/study-accuracy.json \
        docs/bench/accuracy/scaled/study-accuracy.json

Prints, per P, one row per rule: validation accuracy (chooses) and test accuracy
(reported) per seed, ``div`` for a run that stopped on a non-finite loss and ``chance``
for one that ended below 0.11 (collapsed to one class), and whether it converged where
sync converged on the same seed.
"""
import json
import sys

ORDER = ["sync", "pseudo-sync:last:1", "pseudo-sync:adaptive:1", "pseudo-sync:local:1", "pseudo-sync:adaptive-local:1",
         "pseudo-sync:dc-asgd:1", "pseudo-sync:last:2", "pseudo-sync:adaptive:2", "pseudo-sync:local:2",
         "pseudo-sync:adaptive-local:2", "pseudo-sync:gap-aware:2"]


def cell(r) -> str:
    if r is None:
        return "not run"
    if r.get("status") == "diverged":
        return "div"
    if r.get("status") != "ok":
        return r.get("status", "?")
    v, t = r.get("val_accuracy"), r.get("reported")
    note = " (chance)" if v is not None and v < 0.11 else ""
    return f"{v:.3f} / {t:.3f}{note}"


def ok(r) -> bool:
    return r is not None and r.get("status") == "ok" and (r.get("val_accuracy") or 0) >= 0.11


def main(paths) -> None:
    runs = {}
    for p in paths:
        for r in json.load(open(p))["runs"]:
            if r["lr"] == "scaled":
                runs[(r["P"], r["label"], r["seed"])] = r
    seeds = sorted({k[2] for k in runs})
    for P in sorted({k[0] for k in runs}):
        print(f"\nP = {P}: validation / test accuracy per seed ({', '.join(map(str, seeds))})\n")
        print("| rule | " + " | ".join(f"seed {s}" for s in seeds) + " | converged where sync did |")
        print("|---|" + "---|" * len(seeds) + "---|")
        for label in ORDER:
            cells = [runs.get((P, label, s)) for s in seeds]
            if all(c is None for c in cells):
                continue
            both = [s for s in seeds if ok(runs.get((P, "sync", s))) and runs.get((P, label, s)) is not None]
            conv = "-" if label == "sync" else (f"{sum(ok(runs[(P, label, s)]) for s in both)} of {len(both)}"
                                                if both else "no sync run converged")
            print(f"| `{label}` | " + " | ".join(cell(c) for c in cells) + f" | {conv} |")


if __name__ == "__main__":
    main(sys.argv[1:] or ["docs/bench/accuracy/study-accuracy.json"])
