"""Worker for tests/test_clip_norm.py: ``python tests/clip_norm_worker.py OUT.npz`` on P ranks.

Every algorithm of the registry trains a few steps of the tests' MLP on synthetic data, every rank
on its own shard, with plain SGD (no momentum, no weight decay) and ``clip_norm`` far below the
gradients' norms, so that every update direction is clipped. Rank 0 saves, per algorithm spec:
``clips_<spec>`` (each rank's count of clipped directions), ``moves_<spec>`` ((steps,) this rank's
largest ``||w_{t+1} - w_t||`` over ranks) and ``same_<spec>`` (whether every rank held the same
weights after every step).
"""
import sys

import numpy as np

LR, CLIP, STEPS = 0.1, 1e-3, 6


def specs():
    from minips.distributed.algorithms import ALGORITHMS
    return list(ALGORITHMS) + ["pseudo-sync:local:1", "pseudo-sync:spike:1", "pseudo-sync:adaptive:1",
                               "pseudo-sync:adaptive-local:1"]  # local-rewind refuses --clip-norm (a test)


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
    opt = SGD(model.parameters(), lr=LR, clip_norm=CLIP)
    algo = build_algorithm(spec, model.parameters(), opt, comm)
    x, y = synthetic()
    loader = BatchLoader(x, y, algo.batch_size(8), DistributedSampler(len(x), comm.rank, comm.size, seed=3))
    algo.start()
    algo.ctx.planned_steps = 2 * STEPS  # as the Trainer tells it (post-local SGD switches at half of it)
    moves, same = [], []
    batches = iter(loader)
    for _ in range(STEPS):
        w0 = algo.flat.weights.copy()
        for _ in range(algo.batches_per_step()):
            batch = next(batches)
            with algo.compute_point():
                loss = model.loss(batch)
                algo.before_backward()
                loss.backward()
        algo.step()
        moves.append(max(comm.allgather(float(np.linalg.norm(algo.flat.weights - w0)))))
        same.append(len(set(comm.allgather(algo.flat.checksum()))) == 1)
    algo.finish()
    return np.array(comm.allgather(opt.clips)), np.array(moves), np.array(same)


def main(out):
    from minips.distributed.comm import get_comm
    comm = get_comm(progress="poll")
    saved = {}
    for spec in specs():
        saved[f"clips_{spec}"], saved[f"moves_{spec}"], saved[f"same_{spec}"] = train(spec, comm)
    if comm.rank == 0:
        np.savez(out, size=comm.size, **saved)


if __name__ == "__main__":
    from minips.distributed.comm import run_or_abort
    run_or_abort(main, sys.argv[1])
