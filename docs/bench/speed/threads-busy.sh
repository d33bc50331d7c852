#!/usr/bin/env bash
# Busy-node measurement of docs/kernels.md ("Threads on a busy node"): two busy
# processes started here, then whole training runs compared pair by pair.
# before: the old behaviour (2 Numba threads per rank on 2 cores, OpenMP's default
# spin-then-sleep wait); after: the new default (NUMBA_NUM_THREADS unset).
set -u
# TIMER: a whole-process timer that runs A and B in turn, 3 pairs, and prints min/median/max of
# user, sys, cpu and wall seconds and the ratios A/B pair by pair (a public equivalent:
# hyperfine --runs 3 "A" "B", or /usr/bin/time -v in a loop).
TIMER=${TIMER:?set TIMER to a whole-process timer taking -n RUNS --vs B -- A}
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
unset NUMBA_NUM_THREADS
CMD="python -m minips train --model mlp --data fashion-mnist-mini --algo sync --epochs 1 --max-steps 40 --quiet --no-trace --out /tmp/minips-threads-busy"
python -c "while True: pass" & B1=$!
python -c "while True: pass" & B2=$!
sleep 2
echo "busy processes: $B1 $B2"; uptime
echo "== A: before (env OMP_WAIT_POLICY= NUMBA_NUM_THREADS=2)  vs  B: after (default)"
$TIMER -n 3 --warmup 0 --timeout 600 --vs "$CMD" -- env OMP_WAIT_POLICY= NUMBA_NUM_THREADS=2 $CMD
uptime
echo "== A: 2 threads with passive waiting (NUMBA_NUM_THREADS=2)  vs  B: 1 thread (NUMBA_NUM_THREADS=1)"
$TIMER -n 3 --warmup 0 --timeout 600 --vs "env NUMBA_NUM_THREADS=1 $CMD" -- env NUMBA_NUM_THREADS=2 $CMD
uptime
echo "== the fallback message of the default run:"
$CMD 2>&1 | grep "minips:" ; uptime
kill $B1 $B2
