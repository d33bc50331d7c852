#!/usr/bin/env bash
# Time per step of sync and of every compression method at 2 ranks on the EMULATED 1 GbE
# network (docs/compression.md, "Time, 2 ranks, emulated 1 GbE"): mini set, ConvNet, 1 epoch
# (156 steps), seed 0, lr 0.05 constant, each method at the setting of the 4-rank tables.
# sync runs first and again last, to show how much the machine's speed drifted in between.
# The load is written before and after (uptime): on a busy machine the compute and the
# compression phases are slowed by other jobs, the emulated network waits are not.
#   nice -n 10 scripts/bench_compression_p2.sh [OUTDIR]     (default docs/bench/compression)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-docs/bench/compression}
PY=${PYTHON:-python}
MPIEXEC=${MPIEXEC:-mpiexec}
RUN=runs/compress-p2-1gbe
mkdir -p "$OUT" "$RUN"
export NUMBA_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
ALGOS=sync,topk-sgd,qsgd,powersgd,gs-sgd,gaussian-avg:ratio=0.25,gaussian-avg:kernel,pqasgd,ssd-sgd,qprsgd,qprsgd:mode=gossip:s=32@qprsgd-gossip,choco-sgd,sync@sync-again
echo "start: $(date -u) $(uptime)" | tee "$OUT/p2-1gbe-load.txt"
$MPIEXEC -n 2 $PY -m minips compare --quiet --schedule constant --epochs 1 --network 1gbe --algos "$ALGOS" \
  --out "$RUN" | tee "$OUT/p2-1gbe.md"
cp "$RUN/compare.json" "$OUT/p2-1gbe.json"
echo "end: $(date -u) $(uptime)" | tee -a "$OUT/p2-1gbe-load.txt"
