"""Pseudo-sync under MPI against expected weights computed without the
predictor or staleness code (issue 13): tests/test_mpi.py compares with a
simulation that runs the same predictor classes, which checks the plumbing
but not the maths. Here the stale-by-k rule with SpecTrain's lookahead is
written out in plain NumPy below; only the gradients come from the model."""
import json
import sys
from pathlib import Path

import numpy as np

from .conftest import run_ranks

WORKER = Path(__file__).with_name("mpi_worker.py")
P, BATCH, STEPS, LR, MU, K = 2, 8, 12, 0.1, 0.9, 2


def expected_weights(sign=-1.0):
    """Every rank computes its gradient at the lookahead point
    x_t = w_t - K * LR * MU * v_t (x_t = w_t before the first update); the
    average over ranks of step t is applied K steps later with heavy-ball
    momentum (v = mu v + G, first v = G; w -= lr v); steps 0..K-1 only fill
    the pipeline. ``sign`` +1 extrapolates the wrong way (to show the test
    tells them apart); 0 is plain stale SGD."""
    import minips as mp
    from minips.data import BatchLoader, DistributedSampler
    from minips.distributed.flat import FlatParams
    from minips.models import MLP

    sys.path.insert(0, str(WORKER.parent))
    from mpi_worker import synthetic

    mp.random.seed(0)
    model = MLP(20, (16,), 4)
    flat = FlatParams(model.parameters())
    x, y = synthetic()
    loaders = [BatchLoader(x, y, BATCH, DistributedSampler(len(x), r, P, seed=3)) for r in range(P)]
    batches = [list(ld) for ld in loaders]  # 512 / 2 / 8 = 32 batches per rank: more than STEPS

    def grad(w, t):  # the mean over ranks of each rank's mean-loss gradient at w
        gs = []
        for r in range(P):
            flat.weights[...] = w
            flat.grads[0].fill(0)
            model.loss(batches[r][t]).backward()
            gs.append(flat.grads[0].astype(np.float64))
        return np.mean(gs, axis=0)

    w = flat.weights.astype(np.float64).copy()
    v, in_flight = None, []
    for t in range(STEPS):
        point = w if v is None else w + sign * K * LR * MU * v
        in_flight.append(grad(point.astype(np.float32), t))
        if len(in_flight) > K:
            G = in_flight.pop(0)
            v = G.copy() if v is None else MU * v + G
            w = w - LR * v
    return w


def test_pseudo_sync_lookahead_matches_plain_numpy(tmp_path):
    out = tmp_path / "run.npz"
    opts = {"algo": "pseudo-sync", "steps": STEPS, "batch": BATCH, "predictor": "lookahead", "staleness": K,
            "lr": LR, "momentum": MU}
    r = run_ranks(P, WORKER, json.dumps(opts), str(out))  # virtual ranks: the rule is under test
    assert r.returncode == 0, r.stderr[-3000:]
    run = np.load(out)
    ref = expected_weights()
    # float32 training against a float64 reference over 12 steps
    np.testing.assert_allclose(run["weights"], ref, rtol=1e-4, atol=1e-5)
    # the test tells the right extrapolation from none and from the wrong sign
    err = np.max(np.abs(run["weights"] - ref))
    for wrong in (0.0, 1.0):
        assert np.max(np.abs(run["weights"] - expected_weights(wrong))) > 20 * err
