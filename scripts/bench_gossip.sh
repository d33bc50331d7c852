#!/usr/bin/env bash
# The gossip methods side by side (docs/results.md, "Gossip methods"):
#   1. accuracy of the averaged model and of rank 0, consensus distance, bytes: 8 ranks
#      (oversubscribed on a 2-core machine: accuracy and bytes only, not time), IID and
#      a non-IID partition;
#   2. time at 2 ranks on the emulated 1 GbE network.
# Mini set, ConvNet, 3 epochs, seed 0, fixed learning rate 0.05 (--schedule constant).
#   scripts/bench_gossip.sh OUTDIR
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/gossip}
PY=${PYTHON:-python}
MPIEXEC=${MPIEXEC:-mpiexec}
mkdir -p "$OUT"
export NUMBA_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
ALGOS=sync,d-psgd:topology=ring,gossip-pga:period=6,gossipgrad,gradient-tracking,gt-pga,pd-sgd,elastic-gossip,sgp,dng
COMMON="--quiet --schedule constant --eval-rank0"
echo "start: $(uptime)" | tee "$OUT/load.txt"
for part in iid dirichlet:0.5; do
  name=p8-${part%%:*}
  $MPIEXEC -n 8 $PY -m minips compare $COMMON --partition "$part" --algos "$ALGOS" --out "$OUT/$name" | tee "$OUT/$name.txt"
  echo "after $name: $(uptime)" | tee -a "$OUT/load.txt"
done
$MPIEXEC -n 2 -bind-to core $PY -m minips compare $COMMON --network 1gbe --algos "$ALGOS" --out "$OUT/p2-1gbe" \
   | tee "$OUT/p2-1gbe.txt"
echo "after p2-1gbe: $(uptime)" | tee -a "$OUT/load.txt"
