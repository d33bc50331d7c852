"""Shared by tests/test_pqasgd_qprsgd.py and tests/test_choco_sgd.py: launch
tests/compress_b_worker.py, a top-k compressor and float64 NumPy simulations
of pqasgd, qprsgd (both modes) and choco-sgd as their docstrings state them,
written here from the pseudo-code (not from minips), and the byte counts the
ring collectives send, from their textbook formulas."""
import json
import math
from pathlib import Path

import numpy as np

from .conftest import run_ranks
from .given_gradients import gradient, initial

WORKER = str(Path(__file__).with_name("compress_b_worker.py"))


def launch(n, runs, tmp_path, timeout=120):
    """The worker's ``runs`` on n virtual ranks (0: one): a list
    of dicts w, log, pending, report, bytes."""
    out = tmp_path / f"cb-{n}-{abs(hash(json.dumps(runs)))}.npz"
    proc = run_ranks(n, WORKER, json.dumps(runs), str(out), timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    z = np.load(out)
    return [{"w": z[f"w{k}"], "log": json.loads(str(z[f"log{k}"])), "pending": int(z[f"pending{k}"]),
             "report": json.loads(str(z[f"report{k}"])), "bytes": z[f"bytes{k}"]} for k in range(len(runs))]


def topk(v, k):
    """The k entries of largest magnitude, the rest 0 (float64)."""
    out = np.zeros_like(v)
    idx = np.argsort(-np.abs(v), kind="stable")[:k]
    out[idx] = v[idx]
    return out


def ring_W(P):
    W = np.zeros((P, P))
    for i in range(P):
        for j in (i - 1, i, i + 1):
            W[i, j % P] = 1 / 3
    return W


def simulate(P, steps, rule, C=lambda v: v, period=1, gamma=1.0, W=None, ef=False, lr=0.1, mu=0.9, d=20,
             spread=0.0, zero_grad=False):
    """Every rank's weights after every step, (steps + 1, P, d), float64.

    rule: ``pqasgd`` (anchor a, every period: a += mean_i C(w_i - a), w_i = a;
    ``ef``: error feedback), ``gossip`` (qprsgd's gossip mode: every period
    x_hat_i += C(w_i - x_hat_i), w_i = sum_j W_ij x_hat_j) or ``choco``
    (every step: x_hat_i += C(w_i - x_hat_i), w_i += gamma (W x_hat - x_hat)_i).
    The public copies start at w_0 (or at 0 with ``spread``, ranks apart)."""
    w = np.array([initial(d, i, spread) if spread else initial(d) for i in range(P)], np.float64)
    v, m = np.zeros_like(w), np.zeros_like(w)
    a, xh = w[0].copy(), (np.zeros_like(w) if spread else w.copy())
    out = [w.copy()]
    for t in range(steps):
        g = np.array([0 * w[i] if zero_grad else gradient(w[i].astype(np.float32), i, t) for i in range(P)])
        v = g if t == 0 else mu * v + g
        w = w - lr * v
        if rule == "choco":
            xh = xh + np.array([C(w[i] - xh[i]) for i in range(P)])
            w = w + gamma * (W @ xh - xh)
        elif (t + 1) % period == 0:
            if rule == "pqasgd":
                e = w - a + m if ef else w - a
                q = np.array([C(e[i]) for i in range(P)])
                m = e - q if ef else m
                a = a + q.mean(axis=0)
                w = np.repeat(a[None], P, axis=0)
            else:
                xh = xh + np.array([C(w[i] - xh[i]) for i in range(P)])
                w = W @ xh
        out.append(w.copy())
    return np.array(out)


def qsgd_bytes(d, s, bucket=512):
    """The QSGD payload: one float32 norm per bucket + ceil(log2(2s+1)) bits per entry."""
    return 4 * math.ceil(d / bucket) + math.ceil(math.ceil(math.log2(2 * s + 1)) * d / 8)


def allgatherv_sent(P, n):
    """Bytes one rank sends in a ring allgather of P blocks of n bytes: every block but its successor's."""
    return (P - 1) * n


def allreduce_sent(P, n):
    """Bytes one rank sends in a ring allreduce of n bytes."""
    return 2 * (P - 1) * n // P
