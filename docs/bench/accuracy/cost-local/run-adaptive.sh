#!/usr/bin/env bash
set -e
rm -rf "runs/cost25/run-adaptive"
NUMBA_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 ".venv/bin/mpiexec" -n 2 ".venv/bin/python" -m minips train   --algo pseudo-sync:adaptive --max-steps 120 --epochs 1 --quiet --no-trace --out "runs/cost25/run-adaptive" >/dev/null
".venv/bin/python" -c "import json; s=json.load(open('runs/cost25/run-adaptive/summary.json')); print(json.dumps({'predictor': 'adaptive', 'step_time_s': s['step_time_s'], 'time_breakdown': s['time_breakdown']}))" >> "runs/cost25/adaptive.jsonl"
