"""Worker for the gradient-tracking, gt-pga, dng and hetero-gossip tests:
``mpiexec -n P python tests/gossip3_worker.py JSON OUT.npz``.

mode "train" (default): the MLP of mpi_worker.py on its synthetic data through
the public algorithm interface (SGD lr, momentum, nesterov from JSON). Rank 0
saves every rank's final weights (``all_weights``), the weights, and per step:
``track_err`` = max |mean_i y_i - mean_i g_i| / max |mean_i g_i| (algorithms with
a tracker ``y`` and ``g_old``), ``dng_err`` = max |mean x_new - (mean y_old -
alpha mean g)| / max |mean x_new| (dng), and ``y`` (dng's extrapolated point).

mode "mix": on random per-rank vectors, for every topology in JSON
``topologies``: ``mean_err`` = the change of the mean over ranks by one gossip
step (several t for time-varying graphs), ``complete_err`` = complete graph's
mix vs the allreduce average; and ``weighted_err`` = the change of
``sum_i n_i w_i`` by hetero-gossip's pairwise averages, ``pair_diff`` = max
difference between the weights of two partners after it (0: bitwise equal).
"""
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))


def _mean(comm, a):
    s = np.ascontiguousarray(a, np.float32).copy()
    comm.allreduce(s)
    return s.astype(np.float64) / comm.size


def train(opts, out):
    import minips as mp
    from minips.data import BatchLoader, DistributedSampler
    from minips.distributed.algorithms import build_algorithm
    from minips.distributed.comm import get_comm
    from minips.models import MLP
    from minips.optim import SGD
    from mpi_worker import synthetic

    comm = get_comm()
    mp.random.seed(0)
    model = MLP(20, (16,), 4)
    mom = opts.get("momentum", 0.9)
    opt = SGD(model.parameters(), lr=opts.get("lr", 0.1), momentum=mom, nesterov=opts.get("nesterov", False))
    algo = build_algorithm(opts["algo"], model.parameters(), opt, comm)
    x, y = synthetic()
    loader = BatchLoader(x, y, opts.get("batch", 8), DistributedSampler(len(x), comm.rank, comm.size, seed=3))
    algo.start()
    track, dng, step = [], [], 0
    while step < opts["steps"]:
        for batch in loader:
            with algo.compute_point():
                loss = model.loss(batch)
                algo.before_backward()
                loss.backward()
            y_old = None if getattr(algo, "y", None) is None or hasattr(algo, "g_old") else algo.y.copy()
            if y_old is None and hasattr(algo, "coefficients"):
                y_old = algo.flat.weights.copy()  # dng's first step: y = x = w0
            g = algo.flat.grads[0].copy()
            algo.step()
            if hasattr(algo, "g_old"):   # the tracking invariant, in float64 after a float32 allreduce
                my, mg = _mean(comm, algo.y), _mean(comm, algo.g_old)
                assert np.array_equal(algo.g_old, g)
                track.append(np.abs(my - mg).max() / np.abs(mg).max())
            if hasattr(algo, "coefficients"):
                alpha, _ = algo.coefficients(algo.step_count - 1)
                mx = _mean(comm, algo.flat.weights)
                want = _mean(comm, y_old) - alpha * _mean(comm, g)
                dng.append(np.abs(mx - want).max() / np.abs(mx).max())
            step += 1
            if step == opts["steps"]:
                break
    algo.finish()
    everyone = comm.allgather(algo.flat.weights.copy())
    if comm.rank == 0:
        np.savez(out, weights=algo.flat.weights, all_weights=np.array(everyone), track_err=np.array(track),
                 dng_err=np.array(dng), y=getattr(algo, "y", None) if hasattr(algo, "coefficients") else 0,
                 pending=comm.pending())


def mix(opts, out):
    from minips.distributed.algorithms import build_algorithm
    from minips.distributed.algorithms.gossip_common import GossipOptions, Mixer, build_topology
    from minips.distributed.comm import get_comm
    from minips.models import MLP
    from minips.optim import SGD

    comm = get_comm()
    rng = np.random.default_rng(100 + comm.rank)
    res = {}
    for name in opts["topologies"]:
        top = build_topology(GossipOptions(topology=name), comm.size)
        mixer = Mixer(comm, top, order="self-first")  # as gradient-tracking, gt-pga and dng mix
        x = rng.standard_normal(1000).astype(np.float32)
        errs = []
        for t in range(3):
            m = mixer.mixed(x, t)
            errs.append(np.abs(_mean(comm, m) - _mean(comm, x)).max())
            if name == "complete":
                res["complete_err"] = np.abs(m - _mean(comm, x)).max()
        res[f"mean_err_{name}"] = max(errs)
    model = MLP(20, (16,), 4)
    algo = build_algorithm(opts["hetero"], model.parameters(), SGD(model.parameters(), lr=0.1), comm)
    n = algo.batch_size(16)
    w = algo.flat.weights
    w[...] = rng.standard_normal(w.size).astype(np.float32)
    werr, pdiff = [], []
    for t in range(6):
        algo.ctx.samples = n
        before = _mean(comm, w * np.float32(n))
        algo.gossip(t)
        werr.append(np.abs(_mean(comm, w * np.float32(n)) - before).max())
        j, ws = algo.log["partner"], comm.allgather(w.copy())
        if j >= 0:
            pdiff.append(float(np.abs(ws[j] - w).max()))
    res["weighted_err"], res["pair_diff"] = max(werr), max(pdiff or [0.0])
    res["matched"] = len(pdiff)
    res = {k: comm.allreduce_scalar(float(v), "max") for k, v in res.items()}
    if comm.rank == 0:
        np.savez(out, **res)


if __name__ == "__main__":
    from minips.distributed.comm import run_or_abort
    o = json.loads(sys.argv[1])
    run_or_abort(mix if o.get("mode") == "mix" else train, o, sys.argv[2])
