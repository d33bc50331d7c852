"""Medians over the counted runs of first_layer.py's per-pass figures, this tree (A)
against the base (B): python docs/bench/kernels-patch/summarise.py ab_new.txt ab_base.txt
(the first block of each file is the warm-up run and is skipped)."""
import re
import sys

import numpy as np


def read(path):
    runs = open(path).read().split("minips from ")[2:]          # [0] is empty, [1] the warm-up
    out = {}
    for run in runs:
        for line in run.splitlines()[1:]:
            shape, rest = line.split(":", 1)
            for name, med in re.findall(r"(fwd\+bwd|\+ReLU\+pool|patch|im2col) median\s+([\d.]+)", rest):
                out.setdefault((shape, name), []).append(float(med))
    return out


a, b = read(sys.argv[1]), read(sys.argv[2])
runs = len(next(iter(a.values())))
print(f"{'shape':18} {'figure':11} {'A ms':>8} {'B ms':>8} {'A/B':>6}   (median over {runs} runs of each run's median)")
for key in a:
    ma, mb = np.median(a[key]), np.median(b[key])
    print(f"{key[0]:18} {key[1]:11} {ma:8.3f} {mb:8.3f} {ma / mb:6.2f}")
