#!/usr/bin/env bash
# Issue 42's stability map (docs/accuracy.md section 10), run on one frozen commit: the code of
# COMMIT (default HEAD) is unpacked into runs/map-code-COMMIT (its kernels as minips.kernels, so
# that nothing of the live checkout is imported), and scripts/stability_map.py runs from there
# with the live checkout's config, raw folder (docs/bench/scale/map) and data. Resumable: run the
# same command again and it skips every finished cell. Extra arguments go to `stability_map.py run`
# (e.g. --rules A,B for a new candidate rule, --commit to commit each run's raw files).
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
cd "$CODE"
export MINIPS_DATA_DIR=${MINIPS_DATA_DIR:-$HERE/data}
exec "${PYTHON:-python}" scripts/stability_map.py run --config "$HERE/configs/stability-map.toml" \
    --raw "$HERE/docs/bench/scale/map" --out "$HERE/runs/stability-map" "$@"
