#!/usr/bin/env bash
# Time the README's test command (`python -m pytest -q`) the way issue 51 judges it, on a clean
# copy of this checkout's HEAD, with what a reader needs to trust the number (docs/testing.md):
#
#   scripts/time_suite.sh OUT.txt [CLONE_DIR]        # CLONE_DIR default /tmp/minips-time-suite
#
# - a clean clone of HEAD (no __pycache__, an empty Numba cache: what .ci/run starts from), with
#   its own virtual environment (`pip install -e ".[mpi,test]"` and PyTorch, as .ci/run installs;
#   kept between calls, so only the first call pays the install);
# - the whole command under /usr/bin/time -v (wall clock from the interpreter's start, the CPU of
#   every process it waited for), pytest's own summary line beside it;
# - `uptime` before, every 20 s during and after (the load: other jobs on the cores);
# - a reference loop (30 million Python additions on one core) timed twice before and twice
#   after: this machine's speed drifts by up to 1.9x within minutes (docs/testing.md), and a time
#   read beside the loop's says whether a slow run was the suite or the machine.
# Stop other jobs first (the stability map's workers: `pkill -STOP -f "stability_map.py run"` and
# `pkill -STOP -f "minips train --model convnet --data fashion-mnist --val-fraction"`, then -CONT).
set -uo pipefail
out=${1:?"usage: scripts/time_suite.sh OUT.txt [CLONE_DIR]"}
out=$(realpath -m "$out")
clone=${2:-/tmp/minips-time-suite}
src=$(cd "$(dirname "$0")/.." && pwd)
head=$(git -C "$src" rev-parse HEAD) || { echo "time_suite.sh: $src is not a git checkout" >&2; exit 2; }
if [ -d "$clone/.git" ]; then
  git -C "$clone" fetch -q "$src" "$head" && git -C "$clone" checkout -q --detach "$head" \
    && git -C "$clone" clean -xdfq -e .venv || { echo "time_suite.sh: cannot reset $clone; remove it" >&2; exit 2; }
else
  git clone -q "$src" "$clone" && git -C "$clone" checkout -q --detach "$head" || exit 2
fi
cd "$clone" || exit 2
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv && .venv/bin/pip install -q -e ".[mpi,test]" && .venv/bin/pip install -q torch==2.13.0 \
    || { echo "time_suite.sh: the install in $clone failed" >&2; exit 2; }
fi
# shellcheck disable=SC1091
. .venv/bin/activate
reference() {
  python -c "import time
t = time.process_time(); s = 0
for i in range(30_000_000): s += i
print(f'reference loop (30M additions, one core): {time.process_time() - t:.2f} s CPU')"
}
{
  echo "# scripts/time_suite.sh on a clean clone of $(git log --oneline -1 | cut -c1-72)"
  echo "host: $(python -c 'from minips.kernels.cpuinfo import describe; print(describe())' 2>/dev/null || nproc)"
  echo "uptime before: $(uptime)"
  reference; reference
} > "$out"
(while sleep 20; do echo "uptime during: $(uptime)"; done) >> "$out.load" & poll=$!
/usr/bin/time -v python -m pytest -q > "$out.pytest" 2>> "$out"
status=$?
kill "$poll" 2>/dev/null
{
  echo "exit: $status"
  echo "uptime after: $(uptime)"
  reference; reference
  echo "## pytest's last lines"
  tail -3 "$out.pytest"
  if [ "$status" != 0 ]; then  # what failed and why (pytest's own lines; the rest of its output is not kept)
    echo "## failures"
    grep -E "^(E |_{5,} |FAILED )" "$out.pytest" | head -80
  fi
  echo "## load every 20 s"
  cat "$out.load"
} >> "$out"
rm -f "$out.pytest" "$out.load"
grep -E "passed|failed|Elapsed|reference" "$out"
exit "$status"
