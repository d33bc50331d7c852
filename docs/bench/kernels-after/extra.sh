#!/bin/bash
# Issue 30, after the channels-last kernels: what run.sh does not cover, in the same pause.
#   bash docs/bench/kernels-after/extra.sh OUTDIR BASE
# BASE: an export of the baseline commit (see docs/bench/kernels-baseline/run.sh).
# 1. the per-stage breakdown (CPU time, one thread);
# 2. the baseline's bench train again, right after this branch's (run.sh), same options;
# 3. reported, not targets: one rank with 2 threads, and the LSTM step against PyTorch
#    (skipped with REPORTS=0).
set -u
out=$(realpath -m "${1:?give an output folder}")
base=$(realpath "${2:?give the baseline tree}")
here=$(pwd)
mkdir -p "$out"
{
  echo "# uptime before: $(uptime)"
  echo "\$ NUMBA_NUM_THREADS=1 python -m minips bench kernels --clock cpu --only 'conv2d fwd+bwd' --breakdown --json breakdown.json"
  NUMBA_NUM_THREADS=1 python -m minips bench kernels --clock cpu --only 'conv2d fwd+bwd' --breakdown --json "$out/breakdown.json" 2>&1
  echo "# uptime after: $(uptime)"
} > "$out/breakdown.txt"
{
  echo "# the baseline ($(cat "$base/COMMIT" 2>/dev/null)), run right after this branch's train.txt"
  echo "# uptime before: $(uptime)"
  echo "\$ python -m minips bench train --against torch --ranks 1,2 --batch-size 32,64 --workloads convnet --steps 60 --json train-base.json"
  (cd "$base" && PYTHONPATH="$base" python -m minips bench train --against torch --ranks 1,2 --batch-size 32,64 \
     --workloads convnet --steps 60 --json "$out/train-base.json" 2>&1)
  echo "# uptime after: $(uptime)"
} > "$out/train-base.txt"
cd "$here"
[ "${REPORTS:-1}" = 0 ] && exit 0
{
  echo "# uptime before: $(uptime)"
  echo "\$ python -m minips bench train --against torch --ranks 1 --threads 2 --batch-size 32,64 --workloads convnet --steps 40 --json train-2threads.json"
  python -m minips bench train --against torch --ranks 1 --threads 2 --batch-size 32,64 --workloads convnet --steps 40 \
    --json "$out/train-2threads.json" 2>&1
  echo "# uptime after: $(uptime)"
} > "$out/train-2threads.txt"
{
  echo "# uptime before: $(uptime)"
  echo "\$ python -m minips bench train --against torch --ranks 1 --batch-size 32 --workloads lstm --steps 30 --json train-lstm.json"
  python -m minips bench train --against torch --ranks 1 --batch-size 32 --workloads lstm --steps 30 \
    --json "$out/train-lstm.json" 2>&1
  echo "# uptime after: $(uptime)"
} > "$out/train-lstm.txt"
