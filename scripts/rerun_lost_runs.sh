#!/usr/bin/env bash
# Issue 41: the raw runs of the 5-seed tables that were never committed, rerun on the commit that
# made them (5c3f554), on a CPU that reproduces that commit's runs bit for bit (docs/bench/accuracy/
# five/README.md: which runs were rerun, why, and how each was checked against the original log).
#
#   scripts/rerun_lost_runs.sh SRC OUT QUEUE
#
# SRC: a copy of commit 5c3f554 with its own virtual environment, made by
#        mkdir SRC && git archive 5c3f554 | tar -x -C SRC
#        (cd SRC && python3 -m venv .venv && .venv/bin/pip install -e ".[mpi,test]")
#        ln -s "$PWD/data/fashion-mnist.h5" SRC/data/      # the full set, built as data/README.md says
# OUT: where the studies write (runs/rerun); QUEUE: full (full Fashion-MNIST seeds 3-4, then the
# captioner's seed 2) or mini (the mini set's seeds 3-4, then seeds 0-2: issue 12's runs of those
# seeds came from another CPU and do not reproduce here, so the mini table is rerun whole).
# The two queues can run at once (two runs on 2 cores). Each study skips the runs that finished,
# so a queue can be stopped and started again. Then copy the raw files into docs/bench with
# scripts/collect_runs.py and rebuild the tables with scripts/five_seed_tables.py.
set -euo pipefail
SRC=$(cd "$1" && pwd); OUT=$(mkdir -p "$2" && cd "$2" && pwd); QUEUE=$3
cd "$SRC"
PY="nice -n 10 $SRC/.venv/bin/python"
study() { echo "== $(date -u +%FT%TZ) $(uptime)"; $PY -m minips bench study "$@" > /dev/null; }
K1=sync,pseudo-sync:adaptive:1,pseudo-sync:local:1,pseudo-sync:adaptive-local:1
K2=sync,pseudo-sync:adaptive:2,pseudo-sync:local:2,pseudo-sync:adaptive-local:2
case "$QUEUE" in
  full)
    study configs/study-accuracy-full.toml --out "$OUT/five-full" --seeds 3,4 --ranks 4 --algos $K1
    study configs/study-accuracy-full.toml --out "$OUT/five-full" --seeds 3,4 --ranks 8 --algos $K1
    study configs/study-accuracy-full.toml --out "$OUT/five-full" --seeds 3,4 --ranks 4 --algos $K2
    study configs/study-accuracy-captioner.toml --out "$OUT/five-captioner" --seeds 2 --algos $K1 ;;
  mini)
    for seeds in 3,4 0,1,2; do
      study configs/study-accuracy.toml --out "$OUT/five-mini" --lr fixed --seeds $seeds --ranks 2,4,8 --algos $K1
      study configs/study-accuracy.toml --out "$OUT/five-mini" --lr fixed --seeds $seeds --ranks 4 --algos $K2
    done ;;
  *) echo "QUEUE must be full or mini, got $QUEUE" >&2; exit 2 ;;
esac
echo "== $(date -u +%FT%TZ) done $(uptime)"
