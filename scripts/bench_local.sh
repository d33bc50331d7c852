#!/usr/bin/env bash
# The local-update methods side by side (docs/results.md, "Local-update methods"):
#   1. accuracy and traffic at 4 ranks (oversubscribed on a 2-core machine: accuracy
#      and bytes only, not time), IID data;
#   2. the same with a non-IID partition (STL-SGD's non-IID schedule);
#   3. time at 2 ranks, real network and emulated 1 GbE.
# Mini set, ConvNet, 3 epochs, seed 0, the main job's other defaults.
#   scripts/bench_local.sh OUTDIR
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/local}
PY=${PYTHON:-python}
MPIEXEC=${MPIEXEC:-mpiexec}
mkdir -p "$OUT"
export NUMBA_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
ALGOS=sync,local-sgd:period=4,local-sgd:period=16,post-local-sgd,aperiodic-local-sgd,stl-sgd:t1=40:k1=2,adaptive-batch,overlap-local-sgd,pseudo-sync
echo "start: $(uptime)" | tee "$OUT/load.txt"
$MPIEXEC -n 4 $PY -m minips compare --quiet --algos "$ALGOS" --out "$OUT/p4-iid" | tee "$OUT/p4-iid.txt"
echo "after p4-iid: $(uptime)" | tee -a "$OUT/load.txt"
$MPIEXEC -n 4 $PY -m minips compare --quiet --partition dirichlet:0.5 \
   --algos sync,local-sgd:period=4,stl-sgd:t1=40:k1=2,stl-sgd:t1=40:k1=2:data=non-iid,overlap-local-sgd,pseudo-sync \
   --out "$OUT/p4-dirichlet" | tee "$OUT/p4-dirichlet.txt"
echo "after p4-dirichlet: $(uptime)" | tee -a "$OUT/load.txt"
for net in real 1gbe; do
  flag=""; [ "$net" = real ] || flag="--network $net"
  $MPIEXEC -n 2 -bind-to core $PY -m minips compare --quiet $flag --algos "$ALGOS" --out "$OUT/p2-$net" \
     | tee "$OUT/p2-$net.txt"
  echo "after p2-$net: $(uptime)" | tee -a "$OUT/load.txt"
done
