#!/bin/bash
# Issue 30 yardstick: the two benchmarks as the issue writes them, plus the
# kernel table on CPU time (--clock cpu, robust to other processes on a shared
# machine), with the CPU model and the load recorded around each.
#   bash docs/bench/kernels-baseline/run.sh OUTDIR [SRC]
# SRC: a folder holding the minips sources to measure (default: this checkout);
# the baseline was measured on an export of the commit before the changes:
#   git archive main | tar -x -C /tmp/base && ln -s ../kernels /tmp/base/minips/kernels
#   git rev-parse main > /tmp/base/COMMIT
# Run it with the venv's python first on PATH (numba, torch):
#   PATH=$PWD/.venv/bin:$PATH bash docs/bench/kernels-baseline/run.sh OUT /tmp/base
set -u
out=$(realpath -m "${1:?give an output folder}")
src=$(realpath "${2:-.}")
mkdir -p "$out"
cd "$src"
export PYTHONPATH="$src"
{
  echo "# sources: $src ($(git -C "$src" rev-parse HEAD 2>/dev/null || echo "exported tree of $(cat "$src/COMMIT" 2>/dev/null || echo '?')"))"
  echo "# python: $(command -v python)"
  python -c "import minips.kernels.conv as c; print('# minips.kernels.conv from', c.__file__)"
  echo "# date: $(date -u +%FT%TZ)"
  lscpu | grep -E 'Model name|CPU family|^Model:|^CPU\(s\)|Flags' | sed 's/^/# /'
  echo "# uptime before: $(uptime)"
  echo "# busiest processes before:"
  ps -eo pid,pcpu,etime,args --sort=-pcpu | head -8 | cut -c1-200 | sed 's/^/#   /'
} > "$out/machine.txt"
{
  echo "# uptime before: $(uptime)"
  echo "\$ NUMBA_NUM_THREADS=1 python -m minips bench kernels --json kernels.json"
  NUMBA_NUM_THREADS=1 python -m minips bench kernels --json "$out/kernels.json" 2>&1
  echo "# uptime after: $(uptime)"
} > "$out/kernels.txt"
{
  echo "# uptime before: $(uptime)"
  echo "\$ NUMBA_NUM_THREADS=1 python -m minips bench kernels --clock cpu --only conv2d --json kernels-cpu.json"
  NUMBA_NUM_THREADS=1 python -m minips bench kernels --clock cpu --only conv2d --json "$out/kernels-cpu.json" 2>&1
  echo "# uptime after: $(uptime)"
} > "$out/kernels-cpu.txt"
{
  echo "# uptime before: $(uptime)"
  echo "\$ python -m minips bench train --against torch --ranks 1,2 --batch-size 32,64 --workloads convnet --steps 60 --json train.json"
  python -m minips bench train --against torch --ranks 1,2 --batch-size 32,64 --workloads convnet --steps 60 --json "$out/train.json" 2>&1
  echo "# uptime after: $(uptime)"
} > "$out/train.txt"
{
  echo "# uptime after: $(uptime)"
  echo "# busiest processes after:"
  ps -eo pid,pcpu,etime,args --sort=-pcpu | head -8 | cut -c1-200 | sed 's/^/#   /'
} >> "$out/machine.txt"
