#!/usr/bin/env bash
# Issue 41: the raw runs of issue 31's gap tables (docs/accuracy.md section 8) that were never
# committed, rerun on the commits that made them, on a CPU that reproduces those commits' runs
# bit for bit (docs/bench/accuracy/gaps/README.md: which runs, and how each was checked against
# the study's own record of it).
#
#   scripts/rerun_gap_runs.sh SRCS OUT
#
# SRCS holds one copy per commit, each with its own virtual environment and the full data set:
#   for c in 4eaed74 a152dc0 3fe596b; do
#     mkdir -p SRCS/$c && git archive $c | tar -x -C SRCS/$c
#     (cd SRCS/$c && python3 -m venv .venv && .venv/bin/pip install -e ".[mpi,test]")
#     ln -s "$PWD/data/fashion-mnist.h5" SRCS/$c/data/
#   done
# The studies skip runs that finished, so the script can be stopped and started again. Then:
# scripts/collect_runs.py, and python scripts/gap_tables.py.
set -euo pipefail
SRCS=$(cd "$1" && pwd); OUT=$(mkdir -p "$2" && cd "$2" && pwd)
study() { local c=$1; shift; echo "== $(date -u +%FT%TZ) $c $(uptime)"
          (cd "$SRCS/$c" && nice -n 10 .venv/bin/python -m minips bench study "$@" > /dev/null); }
study 4eaed74 configs/study-gaps.toml --out "$OUT/gaps-mini"
study a152dc0 configs/study-gaps-warmup.toml --out "$OUT/gaps-warmup" \
    --algos pseudo-sync:local:1,pseudo-sync:local:1:sync_warmup=20
study 3fe596b configs/study-gaps-full.toml --out "$OUT/gaps-full" --algos pseudo-sync:local-rewind:1
study a152dc0 configs/study-gaps-captioner.toml --out "$OUT/gaps-captioner"
echo "== $(date -u +%FT%TZ) done $(uptime)"
