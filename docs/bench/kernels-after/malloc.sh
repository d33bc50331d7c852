#!/bin/bash
# The yardstick's bench train with glibc's mmap threshold raised, for this tree and the
# baseline: large freed blocks are reused from the heap instead of returned to the system
# (and page-faulted in again). PyTorch's step time depends on it, and on what the code
# interleaved with it does to glibc's dynamic threshold (docs/kernels.md).
#   bash docs/bench/kernels-after/malloc.sh OUTDIR BASE
set -u
out=$(realpath -m "${1:?give an output folder}")
base=$(realpath "${2:?give the baseline tree}")
export MALLOC_MMAP_THRESHOLD_=268435456 MALLOC_TRIM_THRESHOLD_=536870912
cmd="python -m minips bench train --against torch --ranks 1,2 --batch-size 32,64 --workloads convnet --steps 60"
{
  echo "# MALLOC_MMAP_THRESHOLD_=$MALLOC_MMAP_THRESHOLD_ MALLOC_TRIM_THRESHOLD_=$MALLOC_TRIM_THRESHOLD_"
  echo "# sources: $(pwd) ($(git rev-parse HEAD))"
  echo "# uptime before: $(uptime)"
  echo "\$ $cmd --json train-malloc.json"
  $cmd --json "$out/train-malloc.json" 2>&1
  echo "# uptime after: $(uptime)"
} > "$out/train-malloc.txt"
{
  echo "# MALLOC_MMAP_THRESHOLD_=$MALLOC_MMAP_THRESHOLD_ MALLOC_TRIM_THRESHOLD_=$MALLOC_TRIM_THRESHOLD_"
  echo "# sources: $base (exported tree of $(cat "$base/COMMIT" 2>/dev/null))"
  echo "# uptime before: $(uptime)"
  echo "\$ $cmd --json train-base-malloc.json"
  (cd "$base" && PYTHONPATH="$base" $cmd --json "$out/train-base-malloc.json" 2>&1)
  echo "# uptime after: $(uptime)"
} > "$out/train-base-malloc.txt"
