"""Worker for the gossip-lab engine test: ``mpiexec -n 4 python tests/gossiplab_worker.py OUT.npz [ARGS.json]``.

Runs every case of :data:`CASES` on the MPI engine (one node per rank) and, on
rank 0, saves each case's history (n, rounds + 1, d) and cumulative messages.
Then, given ``ARGS.json`` (a JSON list of argument lists), runs each as
``python -m minips ARGS`` would, in this launch (:func:`minips.cli.main`): the
command line under the same ranks, without starting them again.
"""
import json
import sys

import numpy as np

from minips.averaging.engines import MPICluster
from minips.labs.averaging import simulate
from minips.distributed.comm import get_comm, run_or_abort

ROUNDS = 12
#: (label, method, topology, options)
CASES = [
    ("plain-ring", "plain", "ring", {}),
    ("accelerated-ring", "accelerated", "ring", {}),
    ("pairwise-ring", "pairwise", "ring", {}),
    ("periodic-ring", "periodic", "ring", {"order_seed": 3}),
    ("aco-local-exponential", "aco-local", "exponential", {}),
    ("aco-global-ring", "aco-global", "ring", {}),
    ("push-sum-directed", "push-sum", "directed-ring", {"estimate": "sum"}),
    ("push-sum-one-peer", "push-sum", "one-peer-exponential", {}),
    ("plain-one-peer", "plain", "one-peer-exponential", {}),
]


def main(out):
    comm = get_comm()
    saved = {}
    for label, method, top, opts in CASES:
        r = simulate(method, top, comm.size, ROUNDS, seed=5, d=2, engine=MPICluster(comm, comm.size),
                     keep_history=True, options=opts)
        if comm.rank == 0:
            saved[label + "/history"] = r["history"]
            saved[label + "/messages"] = np.array(r["messages"])
            saved[label + "/bytes"] = np.array(r["bytes_sent"])
    if comm.rank == 0:
        np.savez(out, **saved)


if __name__ == "__main__":
    run_or_abort(main, sys.argv[1])
    if len(sys.argv) > 2:
        from minips.cli import main as cli
        for args in json.loads(sys.argv[2]):
            code = cli(args)
            if code:
                sys.exit(code)
