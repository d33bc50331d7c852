"""Worker for tests/test_overlap_local_sgd.py:
``mpiexec -n P python tests/overlap_local_worker.py JSON OUT.npz``.

Drives the algorithm named by ``spec`` on one flat parameter of ``d`` floats
with *given* gradients, so a one-process NumPy simulation can reproduce every
rank exactly: rank i's gradient at step t is ``w_i - c_i + noise(i, t)``
(a quadratic pulling rank i towards its own centre c_i, plus seeded noise);
see :func:`gradient`. Around every merge it records the consensus distance
just before and just after (the algorithm's ``_wait_anchor`` is wrapped).
Rank 0 saves every rank's final weights, the pending count after finish(),
the logged consensus values and the measured before/after pairs.
"""
import json
import sys

import numpy as np
from given_gradients import gradient, initial  # also what the tests simulate with


def main(opts, out):
    from minips.distributed.algorithms import build_algorithm
    from minips.distributed.comm import get_comm
    from minips.nn.module import Parameter
    from minips.optim import SGD

    comm = get_comm()
    d = opts.get("d", 50)
    p = Parameter(initial(d))
    opt = SGD([p], lr=opts.get("lr", 0.1), momentum=opts.get("momentum", 0.9))
    algo = build_algorithm(opts["spec"], [p], opt, comm)
    algo.start()
    pairs, logged = [], []
    wait_anchor = algo._wait_anchor

    def measured():  # consensus just before the merge, then (after step) just after
        pairs.append([algo.consensus_distance(), np.nan])
        return wait_anchor()

    algo._wait_anchor = measured
    for t in range(opts["steps"]):
        algo.before_backward()
        algo.flat.grads[0][...] = gradient(algo.flat.weights, comm.rank, t)
        n = len(pairs)
        algo.step()
        if len(pairs) > n:
            pairs[-1][1] = algo.consensus_distance()
        if "consensus_before_avg" in algo.log:
            logged.append([t, algo.log["consensus_before_avg"]])
    algo.finish()
    pending = comm.pending()
    weights = comm.allgather(algo.flat.weights.copy())
    if comm.rank == 0:
        np.savez(out, weights=np.array(weights), pending=pending, pairs=np.array(pairs).reshape(-1, 2),
                 logged=np.array(logged).reshape(-1, 2))


if __name__ == "__main__":
    from minips.distributed.comm import run_or_abort
    run_or_abort(main, json.loads(sys.argv[1]), sys.argv[2])
