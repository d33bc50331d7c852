#!/usr/bin/env bash
# The timing measurements of docs/results.md: bench comm (real network, MPICH
# async progress thread, emulated 1 GbE and 10 GbE) and bench scaling (real and
# emulated 1 GbE), on 2 ranks. Run it on a quiet machine (load average well
# below the number of cores); it pauses a running scripts/run_study.sh between
# runs first and resumes it at the end.
#   scripts/timing.sh OUTDIR
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/timing}
PY=${PYTHON:-python}
MPIEXEC=${MPIEXEC:-mpiexec}
mkdir -p "$OUT"
STUDIES="runs/study-mini runs/study-full runs/study-captioner"
for d in $STUDIES; do [ -d "$d" ] && touch "$d/PAUSE"; done
trap 'for d in $STUDIES; do rm -f "$d/PAUSE"; done' EXIT
# wait for a study run in progress to finish
while pgrep -f "minips train .*--out runs/study-" >/dev/null; do sleep 5; done
export NUMBA_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
echo "start: $(uptime)" | tee "$OUT/load.txt"
$PY scripts/cpu_pair_probe.py | tee "$OUT/cpu-pair.txt"
$MPIEXEC -n 2 -bind-to core $PY -m minips bench comm --json "$OUT/comm-real.json" --plot "$OUT/comm-real.png" | tee "$OUT/comm-real.txt"
echo "after comm-real: $(uptime)" | tee -a "$OUT/load.txt"
MPIR_CVAR_ASYNC_PROGRESS=1 $MPIEXEC -n 2 -bind-to core $PY -m minips bench comm --json "$OUT/comm-async.json" --plot "$OUT/comm-async.png" | tee "$OUT/comm-async.txt"
echo "after comm-async: $(uptime)" | tee -a "$OUT/load.txt"
for net in 1gbe 10gbe; do
  $MPIEXEC -n 2 -bind-to core $PY -m minips bench comm --network $net --json "$OUT/comm-$net.json" --plot "$OUT/comm-$net.png" | tee "$OUT/comm-$net.txt"
done
echo "after comm-emulated: $(uptime)" | tee -a "$OUT/load.txt"
$PY -m minips bench scaling --ranks 1,2 --algos sync,overlap-sync,pseudo-sync:adaptive,pseudo-sync:last --steps 60 --repeats 3 \
   --out "$OUT/scaling-real" --comm-json "$OUT/comm-real.json" --json "$OUT/scaling-real.json" \
   --plot "$OUT/scaling-real.png" --plot-projection "$OUT/projection.png" | tee "$OUT/scaling-real.txt"
echo "after scaling-real: $(uptime)" | tee -a "$OUT/load.txt"
$PY -m minips bench scaling --ranks 1,2 --algos sync,overlap-sync,pseudo-sync:adaptive,pseudo-sync:last --steps 60 --repeats 3 \
   --network 1gbe --interference 0 --out "$OUT/scaling-1gbe" --comm-json "$OUT/comm-1gbe.json" \
   --json "$OUT/scaling-1gbe.json" --plot "$OUT/scaling-1gbe.png" --project-networks "" | tee "$OUT/scaling-1gbe.txt"
echo "end: $(uptime)" | tee -a "$OUT/load.txt"
