#!/usr/bin/env bash
# The compression methods of batch A side by side (docs/compression.md):
# accuracy and bytes sent per rank per step at 4 ranks (oversubscribed on a 2-core machine:
# accuracy and bytes only, not time). Mini set, ConvNet, 3 epochs, seed 0, the compare
# defaults (lr 0.05, momentum 0.9, Nesterov, batch 32 per rank); no setting was tuned on
# the test set (they are the papers' or the methods' defaults).
#   scripts/bench_compression.sh OUTDIR
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/compression}
PY=${PYTHON:-python}
MPIEXEC=${MPIEXEC:-mpiexec}
mkdir -p "$OUT"
export NUMBA_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
ALGOS=sync,topk-sgd:ratio=0.01,qsgd:s=15,powersgd:rank=2,gs-sgd:ratio=0.01,gaussian-avg:ratio=0.05,gaussian-avg:kernel:period=8
echo "start: $(date -u) $(uptime)" | tee "$OUT/load.txt"
$MPIEXEC -n 4 $PY -m minips compare --quiet --algos "$ALGOS" --out "$OUT/p4" | tee "$OUT/p4.txt"
echo "end: $(date -u) $(uptime)" | tee -a "$OUT/load.txt"
