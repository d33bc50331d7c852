#!/usr/bin/env bash
# Issue 12's accuracy study (docs/accuracy.md, docs/results.md section 4.1), in the order that gives usable
# results soonest: every cell of the mini grid with seed 0 at the fixed lr, then seed 1,
# then seed 2; then the scaled lr (2 seeds), the captioner at P = 2, full Fashion-MNIST
# at P = 4 if it is built. Each step skips runs that already finished, so the script can
# be stopped and restarted; `touch OUT/PAUSE` holds it between runs.
#   nice -n 10 scripts/run_study_accuracy.sh            (OUT defaults to runs/)
# Rebuild every report from what finished, running nothing:
#   scripts/run_study_accuracy.sh --report-only
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
OUT=${OUT:-runs}
study() { $PY -m minips bench study "$@"; }
if [ "${1:-}" = "--report-only" ]; then
  study configs/study-accuracy.toml --out "$OUT/study-accuracy" --report-only
  study configs/study-accuracy-captioner.toml --out "$OUT/study-accuracy-captioner" --report-only || true
  exit 0
fi
# ALGOS: e.g. ALGOS="--algos sync,pseudo-sync:local:1" to run only some of the grid's entries
ALGOS=${ALGOS:-}
for seed in 0 1 2; do
  study configs/study-accuracy.toml --out "$OUT/study-accuracy" --lr fixed --seeds $seed $ALGOS
done
study configs/study-accuracy.toml --out "$OUT/study-accuracy" --lr scaled --seeds 0,1 $ALGOS
study configs/study-accuracy-captioner.toml --out "$OUT/study-accuracy-captioner"
study configs/study-accuracy.toml --out "$OUT/study-accuracy" --report-only
study configs/study-accuracy-captioner.toml --out "$OUT/study-accuracy-captioner" --report-only
