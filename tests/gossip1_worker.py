"""Worker for the gossip tests (d-psgd, gossip-pga, gossip-aga, pd-sgd):
``mpiexec -n P python tests/gossip1_worker.py JSON OUT.npz``.

JSON is a list of runs ``{"spec", "steps", "d", "lr", "momentum", "spread",
"zero_grad"}`` (zero_grad: every gradient 0, so every step is pure mixing);
each drives the algorithm on one flat parameter of d floats with *given*
gradients, so a NumPy simulation of P ranks reproduces it: rank i's gradient
at step t at weights w is :func:`gradient` (a quadratic pulling rank i towards
its own centre, plus seeded noise), taken inside ``compute_point()``.
``spread`` > 0 starts rank i at ``initial + spread * i`` (no broadcast), and
rank i's training loss at step t is :func:`loss` (read by gossip-aga).
Rank 0 saves, per run k: ``w{k}`` (steps+1, P, d) every rank's weights after
every step, ``log{k}`` the algorithm's per-step log (JSON), ``pending{k}``.
"""
import json
import sys

import numpy as np
from given_gradients import gradient, initial  # also what the tests simulate with


def loss(i, t):
    """Rank i's training loss at step t (falls over time; differs per rank)."""
    return float(4.0 / (1.0 + 0.5 * t) + 0.1 * i)


def run(comm, opts):
    from minips.distributed.algorithms import build_algorithm
    from minips.nn.module import Parameter
    from minips.optim import SGD

    d, spread = opts.get("d", 20), opts.get("spread", 0.0)
    p = Parameter(initial(d, comm.rank, spread))
    opt = SGD([p], lr=opts.get("lr", 0.1), momentum=opts.get("momentum", 0.9))
    algo = build_algorithm(opts["spec"], [p], opt, comm)
    algo.start(broadcast=spread == 0)
    traj, logs = [comm.allgather(algo.flat.weights.copy())], []
    for t in range(opts["steps"]):
        algo.ctx.step, algo.ctx.loss = t, loss(comm.rank, t)
        with algo.compute_point():
            algo.before_backward()
            g = gradient(algo.flat.weights, comm.rank, t)
            algo.flat.grads[0][...] = 0 if opts.get("zero_grad") else g
        algo.step()
        logs.append(dict(algo.log))
        traj.append(comm.allgather(algo.flat.weights.copy()))
    algo.finish()
    return np.array(traj), logs, comm.pending(), algo.report()


def main(runs, out):
    from minips.distributed.comm import get_comm

    comm = get_comm()
    res = {}
    for k, opts in enumerate(runs):
        traj, logs, pending, report = run(comm, opts)
        res.update({f"w{k}": traj, f"log{k}": json.dumps(logs), f"pending{k}": pending,
                    f"report{k}": json.dumps(report)})
    if comm.rank == 0:
        np.savez(out, **res)


if __name__ == "__main__":
    from minips.distributed.comm import run_or_abort
    run_or_abort(main, json.loads(sys.argv[1]), sys.argv[2])
