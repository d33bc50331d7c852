#!/usr/bin/env bash
# Issue 52's time-to-accuracy study (configs/study-time-to-accuracy.toml), trained by the code of one
# frozen commit: the tree of COMMIT (default HEAD) is unpacked into runs/tta-code-COMMIT (its kernels
# as minips.kernels, so that later edits of the checkout change no run) and `bench study` runs from
# there, one process per P (16 and 64 side by side, each one run at a time), seeds outermost and one
# method at a time, so that a stop loses at most the runs in progress. After each run its raw files
# (summary.json with the validation curve, metrics.csv, command.txt: scripts/collect_runs.py) are
# copied to docs/bench/time-to-accuracy/runs/ and, with --commit, committed. Resumable: run the same
# command again; `bench study` skips every finished run in runs/tta-P{P}, continues one that a stop left
# behind (summary.json saying "stopped": "signal") from its checkpoint, and a run whose raw files are
# committed is not run again even where that folder is gone. Runs so far: code b0b3aa0, then 1754df5
# (the same training code; 1754df5 continues stopped runs): docs/bench/time-to-accuracy/study.log.
#   setsid nohup nice -n 19 scripts/run_time_to_accuracy.sh [COMMIT] [--commit] > runs/tta-driver.log 2>&1 &
# `touch runs/tta-P16/PAUSE` (or runs/tta-P64/PAUSE) holds that process between runs.
set -euo pipefail
cd "$(dirname "$0")/.."
HERE=$(pwd)
COMMIT=HEAD
if [[ $# -gt 0 && $1 != --* ]]; then COMMIT=$1; shift; fi
DO_COMMIT=0
if [[ ${1:-} == --commit ]]; then DO_COMMIT=1; fi
SHORT=$(git rev-parse --short "$COMMIT")
CODE="$HERE/runs/tta-code-$SHORT"
if [[ ! -f $CODE/COMMIT ]]; then
    rm -rf "$CODE.tmp" && mkdir -p "$CODE.tmp"
    git archive "$SHORT" | tar -x -C "$CODE.tmp"
    cp -r "$CODE.tmp/kernels" "$CODE.tmp/minips/kernels"
    echo "$SHORT" > "$CODE.tmp/COMMIT"
    rm -rf "$CODE" && mv "$CODE.tmp" "$CODE"
fi
PY=${PYTHON:-python}
if [[ $PY == */* ]]; then PY=$(realpath -s "$PY"); fi
export MINIPS_DATA_DIR=${MINIPS_DATA_DIR:-$HERE/data}
GRID="$HERE/configs/study-time-to-accuracy.toml"
RAW="$HERE/docs/bench/time-to-accuracy/runs"
ALGOS=$(cd "$CODE" && "$PY" -c "import tomllib,sys; print(' '.join(tomllib.load(open(sys.argv[1], 'rb'))['algos']))" "$GRID")
safe() { echo "$1" | sed 's/:/-/g; s/@/_/g'; }
one_P() {
    local P=$1 out="$HERE/runs/tta-P$1"
    for seed in 0 1 2; do
        for algo in $ALGOS; do
            if [[ -f $RAW/P$P-virtual/fixed/$(safe "$algo")/seed$seed/summary.json ]]; then continue; fi
            (cd "$CODE" && "$PY" -m minips bench study "$GRID" --out "$out" --ranks "$P" --seeds "$seed" \
                --algos "$algo" >> "$out.log" 2>&1) || echo "P=$P $algo seed $seed: bench study exited $?" >> "$out.log"
            (
                flock 9
                "$PY" "$HERE/scripts/collect_runs.py" "$out" "$RAW" > /dev/null
                echo "[$(date -u +%FT%TZ)] P=$P $algo seed $seed done (code $SHORT; load $(cut -d' ' -f1-3 /proc/loadavg))" \
                    >> "$HERE/docs/bench/time-to-accuracy/study.log"
                if [[ $DO_COMMIT == 1 ]]; then
                    git -C "$HERE" add docs/bench/time-to-accuracy
                    git -C "$HERE" commit -q -m "raw (issue 52): time-to-accuracy run P=$P $algo seed $seed (code $SHORT)" || true
                fi
            ) 9> "$HERE/runs/tta-commit.lock"
        done
    done
}
mkdir -p "$HERE/runs" "$RAW"
one_P 64 & p64=$!
one_P 16 & p16=$!
wait $p64 $p16
