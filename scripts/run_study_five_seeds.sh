#!/usr/bin/env bash
# Issue 25's 5-seed tables (docs/accuracy.md section 5, docs/results.md section 4.1): seeds 3 and 4
# of the rules sync, adaptive (AESP), local and adaptive-local, added to the 3 seeds that
# scripts/run_study_accuracy.sh ran (0, 1, 2). Mini set P = 2, 4, 8 (k = 1) and P = 4 (k = 2);
# full Fashion-MNIST P = 4 and 8 (k = 1) and P = 4 (k = 2); the captioner at P = 2 (seed 2: 3 seeds).
# Each study skips runs that already finished, so the script can be stopped and restarted.
#   nice -n 10 scripts/run_study_five_seeds.sh           (OUT defaults to runs/)
# Then the tables with paired CIs: python scripts/five_seed_tables.py
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
OUT=${OUT:-runs}
study() { $PY -m minips bench study "$@"; }
K1=sync,pseudo-sync:adaptive:1,pseudo-sync:local:1,pseudo-sync:adaptive-local:1
K2=sync,pseudo-sync:adaptive:2,pseudo-sync:local:2,pseudo-sync:adaptive-local:2
uptime
study configs/study-accuracy.toml --out "$OUT/five-mini" --lr fixed --seeds 3,4 --ranks 2,4,8 --algos $K1
study configs/study-accuracy.toml --out "$OUT/five-mini" --lr fixed --seeds 3,4 --ranks 4 --algos $K2
uptime
study configs/study-accuracy-full.toml --out "$OUT/five-full" --seeds 3,4 --ranks 4 --algos $K1
study configs/study-accuracy-full.toml --out "$OUT/five-full" --seeds 3,4 --ranks 8 --algos $K1
uptime
study configs/study-accuracy-captioner.toml --out "$OUT/five-captioner" --seeds 2 --algos $K1
uptime
study configs/study-accuracy-full.toml --out "$OUT/five-full" --seeds 3,4 --ranks 4 --algos $K2
uptime
