#!/usr/bin/env bash
# The predictor's share of the main job's step at P = 2 (issue 12, "Cost"): the main job
# (ConvNet, mini set, batch 32/rank) for 120 steps with pseudo-sync and predictor A, then B,
# in turn; each run appends its summary.json's time breakdown to OUT/A.jsonl or OUT/B.jsonl.
#   scripts/cost_predict.sh adaptive adaptive-local OUT_DIR
set -euo pipefail
A=$1; B=$2; OUT=$3
mkdir -p "$OUT"
PY=${PYTHON:-python}
MPIEXEC=${MPIEXEC:-$(dirname "$PY")/mpiexec}
for name in "$A" "$B"; do
  cat > "$OUT/run-$name.sh" <<EOS
#!/usr/bin/env bash
set -e
rm -rf "$OUT/run-$name"
NUMBA_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 "$MPIEXEC" -n 2 "$PY" -m minips train \
  --algo pseudo-sync:$name --max-steps 120 --epochs 1 --quiet --no-trace --out "$OUT/run-$name" >/dev/null
"$PY" -c "import json; s=json.load(open('$OUT/run-$name/summary.json')); print(json.dumps({'predictor': '$name', 'step_time_s': s['step_time_s'], 'time_breakdown': s['time_breakdown']}))" >> "$OUT/$name.jsonl"
EOS
  chmod +x "$OUT/run-$name.sh"
done
echo "$OUT/run-$A.sh" "$OUT/run-$B.sh"
