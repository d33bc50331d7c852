"""Worker for the MPI tests: ``mpiexec -n P python tests/mpi_worker.py JSON OUT.npz``.

Trains a small MLP on deterministic synthetic data with one algorithm through
the public algorithm interface, then rank 0 saves: the final flat weights, the
per-rank weight hashes, the number of requests still pending after finish(),
the per-step losses. Options (JSON): algo, steps, batch (per rank), lr,
momentum, staleness, predictor, bucket_mb, progress, network, fail_rank,
fail_step, write_in_flight. With ``algos`` (a list of specs) instead of
``algo`` the ranks train each in turn on one communicator (one launch, not
one per algorithm: a rank costs about 1.5 s of CPU to start) and rank 0 saves
OUT-ALGO.npz for each.
"""
import json
import sys

import numpy as np


def synthetic(n=512, d=20, classes=4, seed=0):
    r = np.random.default_rng(seed)
    x = r.standard_normal((n, 1, 4, 5)).astype(np.float32)
    w = r.standard_normal((d, classes))
    y = (x.reshape(n, -1) @ w).argmax(1).astype(np.int64)
    return x, y


def main(opts, out):
    from minips.distributed.comm import get_comm

    comm = get_comm(network=opts.get("network"), progress=opts.get("progress", "poll"))
    if "algos" not in opts:
        return train(comm, opts, out)
    for algo in opts["algos"]:
        train(comm, {**opts, "algo": algo}, out.removesuffix(".npz") + f"-{algo}.npz")


def train(comm, opts, out):
    import minips as mp
    from minips.data import BatchLoader, DistributedSampler
    from minips.distributed.algorithms import build_algorithm
    from minips.models import MLP
    from minips.optim import SGD

    mp.random.seed(0)
    model = MLP(20, (16,), 4)
    if opts.get("perturb_rank0"):  # start from different weights: start() must broadcast rank 0's
        for p in model.parameters():
            p.data += comm.rank
    opt = SGD(model.parameters(), lr=opts.get("lr", 0.1), momentum=opts.get("momentum", 0.9))
    # opts["algo"] is a spec string; these defaults apply to algorithms that have the option
    defaults = {"staleness": opts.get("staleness", 1), "predictor": opts.get("predictor", "last"),
                "bucket_mb": opts.get("bucket_mb", 0.0005)}
    algo = build_algorithm(opts["algo"], model.parameters(), opt, comm, defaults=defaults)
    x, y = synthetic()
    loader = BatchLoader(x, y, opts.get("batch", 8), DistributedSampler(len(x), comm.rank, comm.size, seed=3))
    algo.start()
    losses, step = [], 0
    while step < opts["steps"]:
        for batch in loader:
            if step == opts.get("fail_step") and comm.rank == opts.get("fail_rank"):
                raise RuntimeError(f"injected failure on rank {comm.rank} at step {step}")
            with algo.compute_point():     # the weights to take the gradient at
                loss = model.loss(batch)
                algo.before_backward()
                loss.backward()
            algo.step()
            if opts.get("write_in_flight") and comm.pending():
                algo.flat.grads[(algo.flat.current + 1) % len(algo.flat.grads)][0] = 1.0  # must raise
            losses.append(loss.item())
            step += 1
            if step == opts["steps"]:
                break
    algo.finish()
    pending = comm.pending()
    hashes = comm.allgather(algo.flat.checksum())
    if comm.rank == 0:
        np.savez(out, weights=algo.flat.weights, hashes=np.array(hashes), pending=pending,
                 losses=np.array(losses), size=comm.size, steps=algo.step_count)


if __name__ == "__main__":
    from minips.distributed.comm import run_or_abort
    run_or_abort(main, json.loads(sys.argv[1]), sys.argv[2])
