"""Stress the stop protocol of a virtual-rank run: send SIGINT once, or twice
0.3 s apart, at random moments of ``train --virtual-ranks P`` many times and
count the signals that were lost. Not part of the test suite (it takes many
minutes); tests/test_faults.py reproduces the race it hunts deterministically
(a hook delivers the signal at the racy point).

Each try starts ``python -m minips train --virtual-ranks P --max-steps N``
into a fresh folder with its stderr on a pseudo-terminal, so that the run
draws its progress bar and says which step it is at; once the bar shows step
k (k uniform in 1..N), the script waits a random part of a step and signals
the process (k = N: during the final evaluation). A run that ends before its
signal is due is run again (counted apart). How a try may end:

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
import fcntl
import json
import os
import pty
import random
import re
import signal
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTE = "the stop signal came after the last step"
RELAY = "SIGINT: ending every virtual rank"


def one_try(root: Path, out: Path, args, n_signals: int, rnd: random.Random | None) -> dict:
    """One run; at a random moment (after the progress bar shows step k, k
    uniform in 1..N, then a random part of a step), ``n_signals`` SIGINTs
    ``args.gap`` apart (``rnd`` None: no signal, to time the run)."""
    cmd = [sys.executable, "-m", "minips", "train", "--virtual-ranks", str(args.ranks), "--model", args.model,
           "--epochs", str(args.epochs), "--max-steps", str(args.max_steps), "--out", str(out), "--overwrite"]
    env = {**os.environ, "NUMBA_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    env.pop("PYTHONPATH", None)
    # stderr on a pseudo-terminal: the run draws its progress bar (step k/N), which says where it is
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 160, 0, 0))  # a width: tqdm draws nothing in 0
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=slave, text=True, cwd=root, env=env)
    os.close(slave)
    out_lines, err, progress = [], [], {"step": 0, "total": None, "at": [], "lock": threading.Lock()}

    def read_out():
        for line in p.stdout:
            out_lines.append((round(time.perf_counter() - t0, 3), line.rstrip("\n")))

    def read_err():
        tail = ""
        while True:
            try:
                chunk = os.read(master, 4096).decode(errors="replace")
            except OSError:  # the run ended (EIO on the pseudo-terminal)
                return
            if not chunk:
                return
            err.append(chunk)
            tail = (tail + chunk)[-300:]  # a bar update may straddle two reads
            for k, n in re.findall(r"(\d+)/(\d+) \[", tail):
                with progress["lock"]:
                    progress["total"] = int(n)
                    if int(k) > progress["step"]:
                        progress["step"] = int(k)
                        progress["at"].append((int(k), time.perf_counter() - t0))

    readers = [threading.Thread(target=read_out, daemon=True), threading.Thread(target=read_err, daemon=True)]
    for t in readers:
        t.start()
    sent, target = [], None
    if rnd is not None:
        while progress["total"] is None and p.poll() is None:
            time.sleep(0.01)
        if progress["total"]:
            target = rnd.randint(1, progress["total"])
            while progress["step"] < target and p.poll() is None:
                time.sleep(0.005)
            at = progress["at"]
            step_s = (at[-1][1] - at[0][1]) / (at[-1][0] - at[0][0]) if len(at) > 1 and at[-1][0] > at[0][0] else 0.2
            time.sleep(rnd.uniform(0, step_s))  # somewhere in the next step (after the last: the final evaluation)
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
    os.close(master)
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
    return {"signals": n_signals, "after_step": target, "steps_planned": progress["total"], "sent_at_s": sent,
            "ended_at_s": round(t_end, 3), "rc": rc, "stopped": stopped, "steps": summary.get("steps"),
            "outcome": outcome, "stdout_tail": [x for _, x in out_lines[-3:]],
            "stderr_tail": [x for x in re.split(r"[\r\n]+", stderr.strip())[-3:]]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tries", type=int, default=50, help="tries per signal count (default 50)")
    ap.add_argument("--signals", default="1,2", help="signal counts to try, e.g. 1,2 (default)")
    ap.add_argument("--gap", type=float, default=0.3, help="seconds between two signals (default 0.3)")
    ap.add_argument("--ranks", type=int, default=8, help="virtual ranks (default 8)")
    ap.add_argument("--model", default="mlp", help="model (default mlp: quick steps)")
    ap.add_argument("--epochs", type=int, default=1, help="epochs (default 1)")
    ap.add_argument("--max-steps", type=int, default=12,
                    help="steps per run (default 12: the race is at a run's end, short runs reach it often)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds a try may take (default 300)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random delays (default 0)")
    ap.add_argument("--root", default=str(ROOT), help="the checkout whose minips runs (default this one)")
    ap.add_argument("--json", help="write every try here")
    args = ap.parse_args(argv)
    rnd, root = random.Random(args.seed), Path(args.root).resolve()
    if args.max_steps < 2:
        ap.error("--max-steps must be >= 2")
    counts = [int(s) for s in args.signals.split(",")]
    tries, load0, t0 = [], os.getloadavg(), time.time()
    with tempfile.TemporaryDirectory(prefix="minips-stress-") as tmp:
        missed = 0
        for i in range(args.tries):
            for n in counts:
                while True:
                    r = one_try(root, Path(tmp) / f"try{i}-{n}-{missed}", args, n, rnd)
                    if r["outcome"] != "no signal":
                        break
                    missed += 1  # it ended before its signal was due: not a try; again
                    print(f"(a run ended before its signal was due; {missed} so far, not counted)", flush=True)
                tries.append(r)
                print(f"try {i + 1}/{args.tries}, {n} signal(s) after step {r['after_step']} of "
                      f"{r['steps_planned']}: {r['outcome']} (exit {r['rc']}, stopped {r['stopped']}, steps "
                      f"{r['steps']})", flush=True)
    load1 = os.getloadavg()
    kinds = ("stopped", "aborted", "noted", "exiting", "LOST", "FAILED")
    print(f"\n{'signals':>8} {'tries':>6} " + " ".join(f"{k:>8}" for k in kinds))
    for n in counts:
        mine = [r for r in tries if r["signals"] == n]
        print(f"{n:>8} {len(mine):>6} " + " ".join(f"{sum(r['outcome'] == k for r in mine):>8}" for k in kinds))
    print(f"{time.time() - t0:.0f} s; {missed} run(s) ended before their signal was due (not counted); load "
          f"average before {load0[0]:.1f}, after {load1[0]:.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"root": str(root), "args": vars(args), "missed": missed,
                                               "load_before": load0, "load_after": load1, "tries": tries},
                                              indent=1) + "\n")
    return 1 if any(r["outcome"] in ("LOST", "FAILED") for r in tries) else 0


if __name__ == "__main__":
    sys.exit(main())
