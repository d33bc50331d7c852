#!/usr/bin/env bash
# Issue 42's stability map (docs/accuracy.md section 10), trained by the code of one frozen commit:
# the tree of COMMIT (default HEAD) is unpacked into runs/map-code-COMMIT (its kernels as
# minips.kernels, so that nothing of the live checkout is imported), the driver
# scripts/stability_map.py is copied there from the checkout (it only schedules and copies: the
# code that trains is COMMIT's), and it runs from there with the checkout's config, raw folder
# (docs/bench/scale/map) and data. Resumable: run the same command again (with the same COMMIT) and
# it skips every finished cell. Extra arguments go to `stability_map.py run` (e.g. --rules A,B for a
# new candidate rule, --commit to commit each run's raw files).
#   nice -n 15 scripts/run_stability_map.sh [COMMIT] [--workers 2] [--commit] [--rules ...]
set -euo pipefail
cd "$(dirname "$0")/.."
HERE=$(pwd)
COMMIT=HEAD
if [[ $# -gt 0 && $1 != --* ]]; then COMMIT=$1; shift; fi
SHORT=$(git rev-parse --short "$COMMIT")
CODE="$HERE/runs/map-code-$SHORT"
if [[ ! -f $CODE/COMMIT ]]; then
    rm -rf "$CODE.tmp" && mkdir -p "$CODE.tmp"
    git archive "$SHORT" | tar -x -C "$CODE.tmp"
    cp -r "$CODE.tmp/kernels" "$CODE.tmp/minips/kernels"   # minips.kernels from the frozen copy
    echo "$SHORT" > "$CODE.tmp/COMMIT"
    rm -rf "$CODE" && mv "$CODE.tmp" "$CODE"
fi
cp scripts/stability_map.py "$CODE/scripts/stability_map.py"
PY=${PYTHON:-python}
if [[ $PY == */* ]]; then PY=$(realpath -s "$PY"); fi   # a relative PYTHON (.venv/bin/python): this checkout's, not the copy's (-s: a venv's python is a symlink to the base one)
cd "$CODE"
export MINIPS_DATA_DIR=${MINIPS_DATA_DIR:-$HERE/data}
exec "$PY" scripts/stability_map.py run --config "$HERE/configs/stability-map.toml" \
    --raw "$HERE/docs/bench/scale/map" --out "$HERE/runs/stability-map" \
    --figure "$HERE/docs/figures/stability-map.png" "$@"
