"""Worker for tests/test_local_predictors.py:
``mpiexec -n P python tests/local_predictor_worker.py OUT.npz``, or on P virtual ranks
(``run_ranks(P, ...)``, as the tests run it).

Two checks per launch, each a few steps of the tests' MLP on synthetic data:

1. *Same batch on every rank*: each spec in SAME trains on the batches of a
   one-rank sampler (every rank sees the same data), recording the weights
   after every step; rank 0 saves them (``same_<spec>``, (steps, n)) and
   whether every rank ended with the same weights.
2. *Own data per rank* with ``adaptive-local``: every rank's lambda after every
   step, gathered on rank 0 (``lam_<k>``, (P, steps)).
3. *Own data per rank*, ``local``'s synchronous warm-up (issue 31): each spec in
   OWN, rank 0's weights after every step (``own_<spec>``, (steps, n)) and, per
   step, whether every rank held the same weights (``own_same_<spec>``).
"""
import sys

import numpy as np

SAME = ["sync", "pseudo-sync:last:1", "pseudo-sync:local:1", "pseudo-sync:local:2",
        "pseudo-sync:adaptive-local:1", "pseudo-sync:adaptive-local:2",
        "pseudo-sync:local-rewind:1", "pseudo-sync:local-rewind:2", "pseudo-sync:layerwise-local:1",
        "pseudo-sync:local:2:sync_warmup=4"]
OWN = ["sync", "pseudo-sync:local:1", "pseudo-sync:local:1:sync_warmup=4", "pseudo-sync:local:2:sync_warmup=4"]
STEPS = 16


def train(spec, comm, same_data):
    import minips as mp
    from minips.data import BatchLoader, DistributedSampler
    from minips.distributed.algorithms import build_algorithm
    from minips.models import MLP
    from minips.optim import SGD

    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    from mpi_worker import synthetic

    mp.random.seed(0)
    model = MLP(20, (16,), 4)
    opt = SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)
    algo = build_algorithm(spec, model.parameters(), opt, comm)
    x, y = synthetic()
    rank, size = (0, 1) if same_data else (comm.rank, comm.size)
    loader = BatchLoader(x, y, 8, DistributedSampler(len(x), rank, size, seed=3))
    algo.start()
    weights, lams, same = [], [], []
    for batch in loader:
        with algo.compute_point():
            loss = model.loss(batch)
            algo.before_backward()
            loss.backward()
        algo.step()
        weights.append(algo.flat.weights.copy())
        lams.append(algo.log.get("lambda", np.nan))
        same.append(len(set(comm.allgather(algo.flat.checksum()))) == 1)
        if len(weights) == STEPS:
            break
    algo.finish()
    return np.array(weights), np.array(lams), np.array(same)


def main(out):
    from minips.distributed.comm import get_comm
    comm = get_comm(progress="poll")
    saved = {}
    for spec in SAME:
        w, _, same = train(spec, comm, same_data=True)
        saved[f"same_{spec}"], saved[f"identical_{spec}"] = w, same[-1]
    for k in (1, 2):
        _, lam, same = train(f"pseudo-sync:adaptive-local:{k}:warmup=1", comm, same_data=False)
        saved[f"lam_{k}"] = np.array(comm.allgather(lam))
        saved[f"own_identical_{k}"] = same[-1]
    for spec in OWN:
        saved[f"own_{spec}"], _, saved[f"own_same_{spec}"] = train(spec, comm, same_data=False)
    if comm.rank == 0:
        np.savez(out, size=comm.size, **saved)


if __name__ == "__main__":
    from minips.distributed.comm import run_or_abort
    run_or_abort(main, sys.argv[1])
