"""Worker for the tests of pqasgd, qprsgd and choco-sgd:
``mpiexec -n P python tests/compress_b_worker.py JSON OUT.npz``.

The runs of tests/gossip1_worker.py (a list of ``{"spec", "steps", "d", "lr",
"momentum", "spread", "zero_grad"}``: one flat parameter of d floats driven
with the given gradients of tests/given_gradients.py, so a NumPy simulation
reproduces it), plus the bytes this rank sent in each step. Rank 0 saves per
run k: ``w{k}`` (steps+1, P, d) every rank's weights after every step,
``log{k}`` (JSON), ``pending{k}``, ``report{k}`` (JSON) and ``bytes{k}``
(steps, P) every rank's bytes sent per step.
"""
import json
import sys

import numpy as np
from given_gradients import gradient, initial


def run(comm, opts):
    from minips.distributed.algorithms import build_algorithm
    from minips.nn.module import Parameter
    from minips.optim import SGD

    d, spread = opts.get("d", 20), opts.get("spread", 0.0)
    p = Parameter(initial(d, comm.rank, spread))
    opt = SGD([p], lr=opts.get("lr", 0.1), momentum=opts.get("momentum", 0.9))
    algo = build_algorithm(opts["spec"], [p], opt, comm)
    algo.start(broadcast=spread == 0)
    traj, logs, sent = [comm.allgather(algo.flat.weights.copy())], [], []
    for t in range(opts["steps"]):
        algo.ctx.step = t
        before = comm.bytes_sent
        with algo.compute_point():
            algo.before_backward()
            g = gradient(algo.flat.weights, comm.rank, t)
            algo.flat.grads[0][...] = 0 if opts.get("zero_grad") else g
        algo.step()
        sent.append(comm.bytes_sent - before)
        logs.append(dict(algo.log))
        traj.append(comm.allgather(algo.flat.weights.copy()))
    algo.finish()
    return np.array(traj), logs, comm.pending(), algo.report(), np.array(comm.allgather(sent)).T


def main(runs, out):
    from minips.distributed.comm import get_comm

    comm = get_comm()
    res = {}
    for k, opts in enumerate(runs):
        traj, logs, pending, report, sent = run(comm, opts)
        res.update({f"w{k}": traj, f"log{k}": json.dumps(logs), f"pending{k}": pending,
                    f"report{k}": json.dumps(report, default=str), f"bytes{k}": sent})
    if comm.rank == 0:
        np.savez(out, **res)


if __name__ == "__main__":
    from minips.distributed.comm import run_or_abort
    run_or_abort(main, json.loads(sys.argv[1]), sys.argv[2])
