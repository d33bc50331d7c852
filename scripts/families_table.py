"""The table of docs/results.md section 10 from the committed raw files of the
families study: accuracy at P = 4 and 8 and traffic at P = 8
(docs/bench/families/study-families.json), step time at P = 2 on the emulated
1 GbE and 10 GbE networks (study-families-time-{1gbe,10gbe}.json).

    python scripts/families_table.py [docs/bench/families]

A dagger marks the methods whose rule is a reconstruction (the registry's
``paper`` says so; docs/specifications.md says what was chosen).
"""
import json
import sys
from pathlib import Path

from minips.distributed.algorithms import resolve

DAGGER = ("\u2020 reconstruction: the paper's text (or its formulas) was not available and the rule is ours "
          "(pseudo-sync: its update and AESP; `local` is our own rule); docs/specifications.md says what was chosen")


def reconstructed(label: str) -> bool:
    """True when the registry's paper line for the label's algorithm says reconstruction."""
    return "reconstruction" in (resolve(label).cls.paper or "").lower()


def main(root="docs/bench/families") -> None:
    root = Path(root)
    study = json.loads((root / "study-families.json").read_text())
    acc = {(c["label"], c["P"]): c for c in study["cells"]}
    t1 = {c["label"]: c for c in json.loads((root / "study-families-time-1gbe.json").read_text())["cells"]}
    t10 = {c["label"]: c for c in json.loads((root / "study-families-time-10gbe.json").read_text())["cells"]}
    print("| family | algorithm (setting) | acc P=4 | acc P=8 | MiB/step P=8 (vs sync) "
          "| ms/step P=2, 1 GbE (vs sync) | ms/step P=2, 10 GbE (vs sync) |")
    print("|---|---|---|---|---|---|---|")
    s1, s10 = t1["sync"]["step_time_s"], t10["sync"]["step_time_s"]
    for label in study["grid"]["algos"]:
        a4, a8 = acc[(label, 4)], acc[(label, 8)]
        ms1, ms10 = t1[label]["step_time_s"] * 1e3, t10[label]["step_time_s"] * 1e3
        mark = " \u2020" if reconstructed(label) else ""
        print(f"| {a4['family']} | `{label}`{mark} | {a4['mean']:.4f} ± {a4['std']:.4f} "
              f"| {a8['mean']:.4f} ± {a8['std']:.4f} "
              f"| {a8['bytes_sent_per_step'] / 2**20:.3g} ({a8['bytes_ratio']:.3g}x) "
              f"| {ms1:.2f} ({ms1 / (s1 * 1e3):.2f}x) | {ms10:.2f} ({ms10 / (s10 * 1e3):.2f}x) |")
    print(f"\n{DAGGER}")


if __name__ == "__main__":
    main(*sys.argv[1:])
