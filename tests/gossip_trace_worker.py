"""Worker for the gossip tests: ``mpiexec -n P python tests/gossip_trace_worker.py JSON OUT.npz``.

Trains the MLP of tests/mpi_worker.py on its synthetic data with one algorithm
(spec ``algo``) for ``steps`` steps and records, for EVERY rank and every step
(gathered to rank 0): the weights before the step (``before``, P x d), the
gradient computed (``grads``), the weights after (``after``), the algorithm's
numerator ``x`` before/after when it has one (push-sum), and its per-step log
(``logs``, JSON). Options: algo, steps, batch, lr, momentum (default 0, so the
tests can check the update rule in NumPy). With a numerator, also the gradient
recomputed at ``x / omega`` (``grads_at_z``) and at ``x`` (``grads_at_x``) on
the same batch by a separate copy of the model that the algorithm never touches.
"""
import json
import sys

import numpy as np


def main(opts, out):
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
    opt = SGD(model.parameters(), lr=opts.get("lr", 0.1), momentum=opts.get("momentum", 0.0))
    algo = build_algorithm(opts["algo"], model.parameters(), opt, comm)
    x, y = synthetic()
    loader = BatchLoader(x, y, opts.get("batch", 8), DistributedSampler(len(x), comm.rank, comm.size, seed=3))
    algo.start()
    rec = {k: [] for k in ("before", "grads", "after", "x_before", "x_after", "grads_at_z", "grads_at_x")}
    logs, step = [], 0
    has_x = hasattr(algo, "x") and algo.x is not None
    if has_x:  # an independent copy of the model: its own parameters and gradients, no FlatParams
        mp.random.seed(0)
        twin = MLP(20, (16,), 4)
        twin_params = list(twin.parameters())

        def twin_grad(w, batch):
            """The flat gradient of the batch's loss at the flat weights w (the algorithm's layout)."""
            for i, p in enumerate(twin_params):
                p.data[...] = algo.flat._view(w, i)
                p.grad = None
            twin.loss(batch).backward()
            g = np.zeros_like(algo.flat.weights)
            for i, p in enumerate(twin_params):
                algo.flat._view(g, i)[...] = p.grad
            return g
    while step < opts["steps"]:
        for batch in loader:
            rec["before"].append(algo.flat.weights.copy())
            if has_x:
                rec["x_before"].append(algo.x.copy())
                rec["grads_at_z"].append(twin_grad(algo.x.astype(np.float64) / float(algo.omega), batch))
                rec["grads_at_x"].append(twin_grad(algo.x, batch))  # where a wrong rule would take it
            with algo.compute_point():
                loss = model.loss(batch)
                algo.before_backward()
                loss.backward()
            rec["grads"].append(algo.flat.grads[algo.flat.current].copy())
            algo.step()
            rec["after"].append(algo.flat.weights.copy())
            if has_x:
                rec["x_after"].append(algo.x.copy())
            logs.append(dict(algo.log))
            step += 1
            if step == opts["steps"]:
                break
    algo.finish()
    everyone = comm.allgather(({k: np.array(v) for k, v in rec.items()}, logs, comm.bytes_sent))
    report = algo.report()
    if comm.rank == 0:
        arrays = {k: np.stack([e[0][k] for e in everyone]) for k in rec if len(rec[k])}
        np.savez(out, **arrays, bytes_sent=np.array([e[2] for e in everyone]),
                 logs=json.dumps([e[1] for e in everyone]), report=json.dumps(report, default=float),
                 pending=comm.pending())


if __name__ == "__main__":
    from minips.distributed.comm import run_or_abort
    run_or_abort(main, json.loads(sys.argv[1]), sys.argv[2])
