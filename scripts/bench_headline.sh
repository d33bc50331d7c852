#!/usr/bin/env bash
# The headline effect, measured A against B: sync SGD and pseudo-synchronous SGD
# (PSEUDO, default pseudo-sync: the local predictor) trained in turn - sync, pseudo-sync, sync, ... -
# on the same data, seed and emulated network, with the load average recorded before
# every run. Prints one row per run (step time and its wait and predict phases, from
# summary.json) and the per-pair ratio pseudo-sync / sync of the step time.
#
#   scripts/bench_headline.sh [PAIRS] [NETWORK] [MAX_STEPS] > docs/bench/headline-DATE.txt
#
# PAIRS (default 3), NETWORK (default 1gbe), MAX_STEPS (default 0 = one whole epoch).
# PSEUDO (environment): the pseudo-sync spec, default "pseudo-sync" (the local predictor). The
# committed docs/bench/headline-*.txt files ran the earlier default, AESP:
# PSEUDO=pseudo-sync:adaptive reproduces them.
# Runs into runs/headline/ (each run replaces the one before: --overwrite).
set -euo pipefail
PAIRS=${1:-3}
NET=${2:-1gbe}
STEPS=${3:-0}
PSEUDO=${PSEUDO:-pseudo-sync}
export NUMBA_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
OUT=runs/headline
CMD=(mpiexec -n 2 -bind-to core python -m minips train --model convnet --epochs 1 --network "$NET"
     --max-steps "$STEPS" --quiet --overwrite)
echo "# $(date -u +%FT%TZ) $(uname -n); cpu: $(python -c 'from minips.kernels import cpuinfo; print(cpuinfo.describe())')"
echo "# command: ${CMD[*]} --algo ALGO --out $OUT/ALGO ; ALGO = sync, $PSEUDO in turn, $PAIRS pairs"
echo "# load average (1, 5, 15 min) before each run; times in ms per step (steady state, after the 5 warm-up steps)"
printf "%-5s %-12s %-18s %9s %8s %8s %8s %10s\n" pair algo load step_ms wait_ms pred_ms fwd+bwd test_acc
for i in $(seq 1 "$PAIRS"); do
  for algo in sync "$PSEUDO"; do
    load=$(cut -d' ' -f1-3 /proc/loadavg)
    dir=$OUT/${algo//:/-}
    "${CMD[@]}" --algo "$algo" --out "$dir" > /dev/null
    python - "$dir/summary.json" "$i" "$algo" "$load" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
b = s["time_breakdown"]
print(f"{sys.argv[2]:<5} {sys.argv[3]:<12} {sys.argv[4]:<18} {1e3 * s['step_time_s']:9.2f} {1e3 * b['wait']:8.2f} "
      f"{1e3 * b.get('predict', 0.0):8.2f} {1e3 * (b['forward'] + b['backward']):8.2f} {s['test_accuracy']:10.4f}")
with open(sys.argv[1] + ".step", "w") as f:
    f.write(str(s["step_time_s"]))
EOF
  done
  python -c "import sys; a, b = (float(open(f'$OUT/{x}/summary.json.step').read()) for x in ('${PSEUDO//:/-}', 'sync')); print(f'      pair $i: $PSEUDO / sync step time = {a / b:.3f}')"
done
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
