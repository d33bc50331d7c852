"""Worker of tests/test_hierarchical.py: the hierarchical allreduce on P ranks
(``mpiexec -n P python tests/hier_worker.py CASE OUT.json``, or virtual ranks).

Cases:
- ``sums``: flat and hierarchical sums of arrays of very different magnitudes
  (2 nodes x P/2 ranks and one node of P), against the fixed order written out
  here, the bits every rank got, bytes counted, nonblocking requests completed
  by ``progress()`` alone, blocking and nonblocking interleaved, a larger buffer
  (the window grows), the thread progress mode;
- ``emulated``: blocking times on the emulated 1 GbE, 2 nodes x 2;
- ``fail-raise`` / ``fail-exit``: local rank 1 of node 1 raises (or exits
  without MPI_Abort) in the middle of the node reduction.
Rank 0 writes what it saw to OUT.json.
"""
import json
import os
import sys
import time

import numpy as np


def contribution(rank: int, n: int) -> np.ndarray:
    """Rank ``rank``'s array: values from 1e-4 to 1e4, so the order of a sum shows in its last bits."""
    r = np.random.default_rng(100 + rank)
    return (r.standard_normal(n) * 10.0 ** r.integers(-4, 5, n)).astype(np.float32)


def node_sum(ranks, n):
    """The node reduction's order: local ranks one after another, in order."""
    acc = contribution(ranks[0], n).copy()
    for r in ranks[1:]:
        acc += contribution(r, n)
    return acc


def sums(comm, out):
    P, n = comm.size, 10_001
    x = contribution(comm.rank, n)
    R = P // 2
    comm.reconfigure(allreduce="flat", ranks_per_node=R)
    flat = x.copy()
    comm.allreduce(flat)
    flat_bytes = (comm.bytes_intra_node, comm.bytes_inter_node)
    comm.reconfigure(allreduce="hierarchical", ranks_per_node=R)
    assert comm.hierarchical and comm.nodes == 2
    hier = x.copy()
    comm.allreduce(hier)
    hier_bytes = (comm.bytes_intra_node - flat_bytes[0], comm.bytes_inter_node - flat_bytes[1])
    # nonblocking, several in flight, completed by progress() alone (as between layers), then blocking again
    reqs = [comm.iallreduce(x * np.float32(k + 1)) for k in range(3)]
    polls = 0
    while comm.progress():
        polls += 1
        if polls > 2_000_000:
            raise RuntimeError("progress() never completed the hierarchical requests")
    nonblocking_ok = all(np.array_equal(r.result, hier * np.float32(k + 1)) or
                         np.allclose(r.result, hier * (k + 1), rtol=1e-5, atol=1e-2) for k, r in enumerate(reqs))
    big = np.tile(x, 3)  # the window grows
    comm.allreduce(big)
    comm.reconfigure(progress="thread", allreduce="hierarchical", ranks_per_node=R)
    threaded = x.copy()
    comm.iallreduce(threaded).wait()
    comm.reconfigure(allreduce="hierarchical", ranks_per_node=P)  # one node of P ranks
    comm.allreduce(np.ones(0, np.float32))  # a new layout's first buffer may be empty
    one_node = x.copy()
    comm.allreduce(one_node)
    got = comm.allgather((hier.tobytes(), one_node.tobytes(), big.tobytes()))
    every = [comm.allgather(v) for v in (hier_bytes, flat_bytes)]
    if comm.rank == 0:
        oracle2 = node_sum(list(range(R)), n) + node_sum(list(range(R, P)), n)  # the two leaders: a + b
        oracle1 = node_sum(list(range(P)), n)
        exact = np.sum([contribution(r, n).astype(np.float64) for r in range(P)], axis=0)
        scale = np.sum([np.abs(contribution(r, n).astype(np.float64)) for r in range(P)], axis=0)
        out.update({
            "identical": all(g == got[0] for g in got),
            "hier_is_fixed_order": bool(np.array_equal(hier, oracle2)),
            "one_node_is_fixed_order": bool(np.array_equal(one_node, oracle1)),
            "big_is_tiled": bool(np.array_equal(big, np.tile(hier, 3))),
            "threaded_equal": bool(np.array_equal(threaded, hier)),
            "hier_err": float(np.max(np.abs(hier - exact) / scale)),
            "flat_err": float(np.max(np.abs(flat - exact) / scale)),
            "hier_vs_flat": float(np.max(np.abs(hier - flat) / scale)),
            "nonblocking_ok": bool(nonblocking_ok), "nbytes": int(x.nbytes),
            "hier_bytes": every[0], "flat_bytes": every[1],
        })


def emulated(comm, out):
    from minips.distributed.costmodel import NETWORKS
    n = 1 << 18  # 1 MiB of float32
    times, charged = {}, {}
    for mode in ("flat", "hierarchical"):
        comm.reconfigure(network="1gbe", progress="none", allreduce=mode, ranks_per_node=2)
        b = np.ones(n, np.float32)
        comm.allreduce(b)  # warm-up (window, connections)
        comm.barrier()
        req = comm.iallreduce(b)
        # what the emulated link is charged: flat, the request's own delay; hierarchical, the leaders' allreduce
        charged[mode] = comm.allgather(req._op.inter_seconds if req._op is not None else req.ready_time - req.post_time)
        req.wait()
        comm.barrier()
        t0 = time.perf_counter()
        comm.allreduce(b)
        times[mode] = comm.allreduce_scalar(time.perf_counter() - t0, "min")
    if comm.rank == 0:
        net = NETWORKS["1gbe"]
        out.update({"times": times, "charged": charged, "flat_model": net.allreduce_time(4 * n, comm.size),
                    "hier_model": net.allreduce_time(4 * n, comm.size // 2)})


def fail(comm, out, how):
    import types

    from minips.distributed.comm import run_or_abort

    comm.reconfigure(allreduce="hierarchical", ranks_per_node=2)
    b = np.ones(1000, np.float32)
    comm.allreduce(b)  # builds this rank's engine; its stages are then replaced on rank 3 only
    engine = comm._hier
    stage = engine._stage

    def dying(self, op):
        if comm.rank == 3 and op.state == "gather":  # local rank 1 of node 1, with its row written
            if how == "exit":
                os._exit(7)
            raise RuntimeError("injected failure in the node reduction on rank 3")
        return stage(op)
    engine._stage = types.MethodType(dying, engine)

    def body():
        for _ in range(3):
            comm.allreduce(b)
    run_or_abort(body)


def main(case, path):
    from minips.distributed.comm import get_comm
    comm = get_comm()
    out = {}
    if case == "sums":
        sums(comm, out)
    elif case == "emulated":
        emulated(comm, out)
    elif case.startswith("fail-"):
        fail(comm, out, case[5:])
    comm.reconfigure()
    if comm.rank == 0:
        with open(path, "w") as fh:
            json.dump(out, fh)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
