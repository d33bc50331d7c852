#!/bin/bash
# Issue 35's measurements: bench comm (flat vs hierarchical, 4 ranks as 2 nodes x 2) on the
# emulated 1 GbE and 10 GbE, and the main job (4 ranks, 2 x 2) with both allreduces.
# Raw outputs go to docs/bench/hierarchical/, with `uptime` before and after each command.
# Run from the repository root with the venv active.
set -u
OUT=${OUT:-docs/bench/hierarchical}
mkdir -p "$OUT"
run() {  # name, command...
    local name=$1; shift
    { echo "\$ $*"; echo "uptime before: $(uptime)"; } > "$OUT/$name.txt"
    /usr/bin/time -p "$@" >> "$OUT/$name.txt" 2>&1
    echo "exit status: $?" >> "$OUT/$name.txt"
    echo "uptime after: $(uptime)" >> "$OUT/$name.txt"
}
export NUMBA_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
for net in 1gbe 10gbe; do
    run comm-$net mpiexec -n 4 python -m minips bench comm --allreduce flat,hierarchical --ranks-per-node 2 \
        --network $net --max-bytes $((16 * 2**20)) --iters 50 --overlap-mb 4 --json "$OUT/comm-$net.json"
done
for algo in sync pseudo-sync; do
    for mode in flat hierarchical; do
        run job-$algo-$mode mpiexec -n 4 python -m minips train --model convnet --data fashion-mnist-mini \
            --algo $algo --epochs 1 --batch-size 32 --network 1gbe --ranks-per-node 2 --allreduce $mode \
            --quiet --no-trace --overwrite --out runs/hier-job-$algo-$mode
        cp runs/hier-job-$algo-$mode/summary.json "$OUT/job-$algo-$mode.summary.json"
    done
done
