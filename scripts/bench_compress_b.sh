#!/usr/bin/env bash
# pqasgd, ssd-sgd, qprsgd (allreduce and gossip modes) and choco-sgd next to sync:
# test accuracy and bytes sent per rank per step (and the ratio to sync's) at 4 ranks,
# oversubscribed on a 2-core machine (accuracy and bytes only, not time).
# Mini set, ConvNet, 3 epochs, seed 0, fixed learning rate 0.05 (--schedule constant),
# each method at its default setting (docs/compression.md says why), except
# ssd-sgd at period 2 (at period 4 it diverged here: p4-ssd-sgd-period4-diverged.txt) and
# qprsgd's gossip mode with QSGD s=32 (at the default s=4 it diverged: p4-qprsgd-gossip-s4-diverged.txt).
# A method whose JSON is already in OUTDIR is skipped (rerun after a failure); a failed run is noted.
#   nice -n 10 scripts/bench_compress_b.sh [OUTDIR]     (default docs/bench/compression)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-docs/bench/compression}
PY=${PYTHON:-python}
MPIEXEC=${MPIEXEC:-mpiexec}
mkdir -p "$OUT"
export NUMBA_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
COMMON="--quiet --schedule constant --eval-rank0"
LOAD="$OUT/load-compress-b.txt"
echo "start: $(uptime)" | tee -a "$LOAD"
for spec in sync pqasgd ssd-sgd:period=2 qprsgd qprsgd:mode=gossip:s=32@qprsgd-gossip choco-sgd; do
  name=p4-${spec##*@}
  name=${name%%:*}
  [ "$spec" = sync ] && name=p4-sync-for-compress-b
  [ -f "$OUT/$name.json" ] && { echo "skip $name: $OUT/$name.json exists" | tee -a "$LOAD"; continue; }
  $MPIEXEC -n 4 $PY -m minips compare $COMMON --algos "$spec" --out "runs/compress-b/$name" > "$OUT/$name.md" \
    2> "runs/compress-b/$name.err" || { echo "FAILED $spec (stderr: runs/compress-b/$name.err)" | tee -a "$LOAD"; }
  cp "runs/compress-b/$name/compare.json" "$OUT/$name.json" 2>/dev/null || true
  echo "after $name: $(uptime)" | tee -a "$LOAD"
done
$PY - "$OUT" <<'PYEOF' | tee "$OUT/p4-compress-b-summary.md"
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
rows = []
for name in ("sync-for-compress-b", "pqasgd", "ssd-sgd", "qprsgd", "qprsgd-gossip", "choco-sgd"):
    f = out / f"p4-{name}.json"
    if not f.exists():
        print(f"| {name} | failed, no result | | |")
        continue
    r = json.loads(f.read_text())[0]
    rows.append((r["label"], r["test_accuracy"], r["bytes_sent_per_step"], r.get("algo_options")))
sync = rows[0][2]
print("\n| method (spec) | test acc | bytes sent per rank per step | ratio to sync |")
print("|---|---|---|---|")
for label, acc, b, _ in rows:
    print(f"| {label} | {acc:.4f} | {b:,.0f} | {b / sync:.4f} |")
PYEOF
echo "end: $(uptime)" | tee -a "$LOAD"
