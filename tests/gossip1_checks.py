"""Shared by tests/test_d_psgd.py, test_gossip_pga.py, test_pd_sgd.py: launch
tests/gossip1_worker.py, and a float64 NumPy simulation of the rules as the
docstrings state them, with P simulated ranks and mixing matrices written out
by hand here (not taken from minips.distributed.topology)."""
import json
import math
import sys
from pathlib import Path

import numpy as np

from .conftest import run_ranks

sys.path.insert(0, str(Path(__file__).parent))
from given_gradients import gradient, initial  # noqa: E402
from gossip1_worker import loss  # noqa: E402

WORKER = str(Path(__file__).with_name("gossip1_worker.py"))
TOL = {"rtol": 2e-5, "atol": 2e-5}  # float32 runs against the float64 rule, ~15 steps


def launch(n, runs, tmp_path, timeout=90):
    """Run the worker's ``runs`` on n ranks; returns a list of (trajectory, logs, pending, report)."""
    out = tmp_path / f"g1-{n}-{abs(hash(json.dumps(runs)))}.npz"
    proc = run_ranks(n, WORKER, json.dumps(runs), str(out), timeout=timeout)  # virtual ranks
    assert proc.returncode == 0, proc.stderr[-3000:]
    z = np.load(out)
    return [(z[f"w{k}"], json.loads(str(z[f"log{k}"])), int(z[f"pending{k}"]), json.loads(str(z[f"report{k}"])))
            for k in range(len(runs))]


def ring(P):
    W = np.zeros((P, P))
    for i in range(P):
        for j in (i - 1, i, i + 1):
            W[i, j % P] = 1 / 3
    return lambda k: W


def complete(P):
    return lambda k: np.full((P, P), 1.0 / P)


def one_peer_exponential(P):
    """Round k: x_i <- (x_i + x_{i - 2^(k mod log2 P)}) / 2."""
    L = int(math.log2(P))

    def W(k):
        M = np.eye(P) / 2
        for i in range(P):
            M[i, (i - 2 ** (k % L)) % P] += 0.5
        return M
    return W


def simulate(P, steps, W, form="atc", lr=0.1, mu=0.9, d=20, spread=0.0, H=None, aga=None, i1=None, i2=1):
    """Every rank's weights after every step, shape (steps + 1, P, d), float64.

    form: cta ``w_i = mix(w)_i - lr v_i`` or atc ``w_i = mix(w_i - lr v_i)``
    (v_i = mu v_i + g_i, g_i at the pre-step w_i). atc with ``H``: Gossip-PGA
    (every H-th step the average instead); with ``aga=(h0, h_max, power)``:
    Gossip-AGA's loss-driven period; with ``i1``: PD-SGD (i1 silent steps,
    then i2 gossip steps). ``W(k)`` is the matrix of the k-th gossip round."""
    w = np.array([initial(d, i, spread) if spread else initial(d) for i in range(P)], np.float64)
    v = np.zeros_like(w)
    out, rounds = [w.copy()], 0
    Hc, nxt, L0, lsum, lcnt = (aga[0], aga[0] - 1, None, np.zeros(P), 0) if aga else (None,) * 5
    pos = 0
    for t in range(steps):
        g = np.array([gradient(w[i].astype(np.float32), i, t) for i in range(P)], np.float64)
        v = g if t == 0 else mu * v + g
        if form == "cta":
            w = W(rounds) @ w - lr * v
            rounds += 1
            out.append(w.copy())
            continue
        z = w - lr * v
        if aga:
            lsum += [loss(i, t) for i in range(P)]
            lcnt += 1
            glob = t == nxt
        elif H:
            glob = (t + 1) % H == 0
        else:
            glob = False
        gossip = not glob
        if i1 is not None:
            gossip, pos = pos >= i1, (pos + 1) % (i1 + i2)
        if glob:
            w = np.repeat(z.mean(axis=0, keepdims=True), P, axis=0)
            if aga:
                Lt = float(np.mean(lsum / lcnt))
                L0 = Lt if L0 is None else L0
                Hc = min(aga[1], max(aga[0], math.ceil(aga[0] * (L0 / Lt) ** aga[2])))
                nxt, lsum, lcnt = t + Hc, np.zeros(P), 0
        elif gossip:
            w = W(rounds) @ z
            rounds += 1
        else:
            w = z
        out.append(w.copy())
    return np.array(out)


def consensus(w):
    """(1/P) sum_i ||w_i - mean w||^2 per step, for a (steps, P, d) trajectory."""
    return ((w - w.mean(axis=1, keepdims=True)) ** 2).sum(axis=2).mean(axis=1)


class StubComm:
    """Just enough of a Comm for an algorithm's setup to fail before communicating."""
    def __init__(self, size, rank=0):
        self.size, self.rank, self.progress_mode = size, rank, "none"

    def allgather(self, obj):
        return [obj] * self.size
