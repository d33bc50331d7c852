#!/usr/bin/env bash
# The whole convergence study, in the order that gives usable results soonest
# (every setting for seed 0 first). Each step skips runs that already finished,
# so the script can be stopped and restarted. `touch runs/study-mini/PAUSE`
# (or runs/study-full/PAUSE) holds it between runs, e.g. for timing benchmarks.
# The earlier study: docs/results.md sections 4.2-4.4 report its full-data, tuning and
# captioner grids (history); its mini grid's tables are docs/bench/study-mini.md. The
# current accuracy study is scripts/run_study_accuracy.sh (docs/results.md section 4.1).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
NO_OVERLAP="sync,pseudo-sync:last:1,pseudo-sync:ema:1,pseudo-sync:holt:1,pseudo-sync:lookahead:1,pseudo-sync:adaptive:1,pseudo-sync:adaptive:1@lam1hmax50,pseudo-sync:last:2,pseudo-sync:ema:2,pseudo-sync:holt:2,pseudo-sync:lookahead:2,pseudo-sync:adaptive:2,pseudo-sync:adaptive:2@lam1hmax50"
study() { $PY -m minips bench study "$@"; }
# What the earlier study ran: mini with 3 seeds at the fixed lr and 2 at the
# scaled one, full data with 3 seeds, the tuning sweep with 2, the captioner with 2.
study configs/study-mini.toml --out runs/study-mini --seeds 0
study configs/study-full.toml --out runs/study-full --seeds 0 --lr fixed
study configs/study-captioner.toml --out runs/study-captioner --seeds 0
# overlap-sync is the same arithmetic as sync (seed 0 checks it): seeds 1, 2 without it
study configs/study-mini.toml --out runs/study-mini --seeds 1 --algos "$NO_OVERLAP"
study configs/study-full.toml --out runs/study-full --seeds 1 --lr fixed
study configs/study-captioner.toml --out runs/study-captioner --seeds 1
study configs/study-mini.toml --out runs/study-mini --seeds 2 --lr fixed --algos "$NO_OVERLAP"
study configs/study-full.toml --out runs/study-full --seeds 2 --lr fixed
study configs/study-tune.toml --out runs/study-mini --lr fixed
# the reports over everything that finished
study configs/study-mini.toml --out runs/study-mini --report-only
study configs/study-full.toml --out runs/study-full --report-only --lr fixed
study configs/study-tune.toml --out runs/study-mini --report-only --lr fixed
study configs/study-captioner.toml --out runs/study-captioner --report-only
