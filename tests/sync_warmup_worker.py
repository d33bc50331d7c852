"""Worker for tests/test_local_predictors.py's synchronous warm-up check:
``mpiexec -n 2 python tests/sync_warmup_worker.py OUT.npz``.

Each spec trains 10 steps of the tests' MLP, every rank on its own data;
rank 0 saves its weights after every step (``w_<spec>``, (steps, n)) and,
per step, whether every rank held the same weights (``same_<spec>``).
"""
import sys

import numpy as np

SPECS = ["sync", "pseudo-sync:local:1", "pseudo-sync:local:1:sync_warmup=4", "pseudo-sync:local:2:sync_warmup=4"]
STEPS = 10


def train(spec, comm):
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
    loader = BatchLoader(x, y, 8, DistributedSampler(len(x), comm.rank, comm.size, seed=3))
    algo.start()
    weights, same = [], []
    for batch in loader:
        with algo.compute_point():
            loss = model.loss(batch)
            algo.before_backward()
            loss.backward()
        algo.step()
        weights.append(algo.flat.weights.copy())
        same.append(len(set(comm.allgather(algo.flat.checksum()))) == 1)
        if len(weights) == STEPS:
            break
    algo.finish()
    return np.array(weights), np.array(same)


def main(out):
    from minips.distributed.comm import get_comm
    comm = get_comm(progress="poll")
    saved = {}
    for spec in SPECS:
        saved[f"w_{spec}"], saved[f"same_{spec}"] = train(spec, comm)
    if comm.rank == 0:
        np.savez(out, **saved)


if __name__ == "__main__":
    from minips.distributed.comm import run_or_abort
    run_or_abort(main, sys.argv[1])
