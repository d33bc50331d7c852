"""Stress the stop protocol of a virtual-rank run: send SIGINT once, or twice
0.3 s apart, at random moments of ``train --virtual-ranks P`` many times and
count the signals that were lost. Not part of the test suite (it takes many
minutes); tests/test_faults.py reproduces the race it hunts deterministically
(a hook delivers the signal at the racy point).

A first run without a signal measures how long a run lasts from its first
line (printed as training starts) to its end (taken again from every run that
runs to its end: the machine's load changes it); each try then starts
``python -m minips train --virtual-ranks P ...`` into a fresh folder, waits
for its first line, then a random delay in [0, that duration], and signals the
process (a run that ends before its signal is due is not a try: it is run
again with a new delay, and counted apart). How a try may end:

- ``stopped``: exit 0, ``summary.json`` says ``"stopped": "signal"`` and
  ``checkpoint.h5`` exists (every rank stopped at the same step);
- ``aborted``: exit 130 and the line ``[minips] SIGINT: ending every virtual
  rank`` (a signal before the stop protocol was armed, or the second one);
- ``noted``: exit 0, ``"stopped"`` not ``"signal"``, and the run's note that
  the signal came after the last step (nothing was left to stop);
- ``exiting``: the signal came as the process was exiting, after its results
  were written (Python's own SIGINT handling: status 130 or -2, no relay line);
- ``LOST``: exit 0, the run trained to its end, and nothing shows a signal
  came: the failure this script hunts;
- ``FAILED``: anything else (a traceback, another exit status, a hang).

Usage (``--root`` runs another checkout's code, e.g. the code before a fix)::

    python scripts/stress_stop_signal.py --tries 100 --signals 1,2 --json out.json

Prints one line per try and a table of counts; ``--json`` writes every try.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTE = "the stop signal came after the last step"
RELAY = "SIGINT: ending every virtual rank"


def one_try(root: Path, out: Path, args, n_signals: int, delay: float | None) -> dict:
    """One run; ``delay`` seconds after its first line, ``n_signals`` SIGINTs
    ``args.gap`` apart (``delay`` None: no signal, to time the run)."""
    cmd = [sys.executable, "-m", "minips", "train", "--virtual-ranks", str(args.ranks), "--model", args.model,
           "--epochs", str(args.epochs), "--out", str(out), "--overwrite"]
    env = {**os.environ, "NUMBA_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    env.pop("PYTHONPATH", None)
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=root, env=env)
    out_lines, err, started = [], [], threading.Event()

    def read():
        for line in p.stdout:
            out_lines.append((round(time.perf_counter() - t0, 3), line.rstrip("\n")))
            if line.startswith("minips:"):
                started.set()
        started.set()

    readers = [threading.Thread(target=read, daemon=True),
               threading.Thread(target=lambda: err.extend(p.stderr), daemon=True)]
    for t in readers:
        t.start()
    started.wait(args.timeout)
    t_first = time.perf_counter() - t0
    sent = []
    if delay is not None:
        time.sleep(delay)
        for i in range(n_signals):
            if i:
                time.sleep(args.gap)
            if p.poll() is not None:
                break
            p.send_signal(signal.SIGINT)
            sent.append(round(time.perf_counter() - t0, 3))
    try:
        rc = p.wait(args.timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        rc = "hang"
    t_end = time.perf_counter() - t0
    for t in readers:
        t.join(5)
    stdout, stderr = "\n".join(x for _, x in out_lines), "".join(err)
    summary = json.loads((out / "summary.json").read_text()) if (out / "summary.json").exists() else {}
    stopped = summary.get("stopped")
    if not sent:
        outcome = "no signal"
    elif rc == 0 and stopped == "signal" and (out / "checkpoint.h5").exists():
        outcome = "stopped"
    elif rc == 130 and RELAY in stderr and "Traceback" not in stderr:
        outcome = "aborted"
    elif rc == 0 and stopped != "signal" and NOTE in stdout:
        outcome = "noted"
    elif rc in (130, -2) and summary and RELAY not in stderr:
        outcome = "exiting"
    elif rc == 0 and summary and stopped != "signal":
        outcome = "LOST"
    else:
        outcome = "FAILED"
    return {"signals": n_signals, "delay_s": None if delay is None else round(delay, 3), "sent_at_s": sent,
            "first_line_at_s": round(t_first, 3), "ended_at_s": round(t_end, 3), "rc": rc, "stopped": stopped,
            "steps": summary.get("steps"), "outcome": outcome, "stdout_at_s": out_lines[-4:],
            "stderr_tail": stderr.strip().splitlines()[-3:]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tries", type=int, default=50, help="tries per signal count (default 50)")
    ap.add_argument("--signals", default="1,2", help="signal counts to try, e.g. 1,2 (default)")
    ap.add_argument("--gap", type=float, default=0.3, help="seconds between two signals (default 0.3)")
    ap.add_argument("--ranks", type=int, default=8, help="virtual ranks (default 8)")
    ap.add_argument("--model", default="mlp", help="model (default mlp: quick steps)")
    ap.add_argument("--epochs", type=int, default=1, help="epochs (default 1)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds a try may take (default 300)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random delays (default 0)")
    ap.add_argument("--root", default=str(ROOT), help="the checkout whose minips runs (default this one)")
    ap.add_argument("--json", help="write every try here")
    args = ap.parse_args(argv)
    rnd, root = random.Random(args.seed), Path(args.root).resolve()
    counts = [int(s) for s in args.signals.split(",")]
    tries, load0, t0 = [], os.getloadavg(), time.time()
    with tempfile.TemporaryDirectory(prefix="minips-stress-") as tmp:
        calib = one_try(root, Path(tmp) / "calibration", args, 0, None)
        span = calib["ended_at_s"] - calib["first_line_at_s"]
        print(f"{root}: a run without a signal lasts {span:.1f} s from its first line (exit {calib['rc']})",
              flush=True)
        missed = 0
        for i in range(args.tries):
            for n in counts:
                while True:
                    r = one_try(root, Path(tmp) / f"try{i}-{n}-{missed}", args, n, rnd.uniform(0, span))
                    if r["outcome"] in ("noted", "exiting", "LOST", "no signal"):  # it ran to its end: the
                        span = r["ended_at_s"] - r["first_line_at_s"]  # machine's load changes its length
                    if r["outcome"] != "no signal":
                        break
                    missed += 1  # it ended before its signal was due: not a try; again, with the new length
                    print(f"(a run ended before its signal was due; {missed} so far, not counted)", flush=True)
                tries.append(r)
                print(f"try {i + 1}/{args.tries}, {n} signal(s) at {r['sent_at_s']} s (first line at "
                      f"{r['first_line_at_s']} s, end at {r['ended_at_s']} s): {r['outcome']} (exit {r['rc']}, "
                      f"stopped {r['stopped']}, steps {r['steps']})", flush=True)
    load1 = os.getloadavg()
    kinds = ("stopped", "aborted", "noted", "exiting", "LOST", "FAILED")
    print(f"\n{'signals':>8} {'tries':>6} " + " ".join(f"{k:>8}" for k in kinds))
    for n in counts:
        mine = [r for r in tries if r["signals"] == n]
        print(f"{n:>8} {len(mine):>6} " + " ".join(f"{sum(r['outcome'] == k for r in mine):>8}" for k in kinds))
    print(f"{time.time() - t0:.0f} s; {missed} run(s) ended before their signal was due (not counted); load "
          f"average before {load0[0]:.1f}, after {load1[0]:.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"root": str(root), "args": vars(args), "run_s": span, "missed": missed,
                                               "load_before": load0, "load_after": load1, "tries": tries},
                                              indent=1) + "\n")
    return 1 if any(r["outcome"] in ("LOST", "FAILED") for r in tries) else 0


if __name__ == "__main__":
    sys.exit(main())
