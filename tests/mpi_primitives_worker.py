"""Worker for tests/test_comm_primitives.py: every communication primitive on P ranks.

``mpiexec -n P python tests/mpi_primitives_worker.py MODE OUTDIR``. Each rank
writes ``OUTDIR/rank{r}.json``: what it received, the errors it saw, its byte
counters and emulated timings. The test checks them against values it computes
itself. MODE ``all`` runs every check; ``bad-graph`` builds a graph that
differs between ranks and does not catch the error (the job must end, not hang).
All data are small integers, so every result is exact.
"""
import json
import sys
from pathlib import Path

import numpy as np

from minips.distributed.comm import get_comm, run_or_abort


def graph_edges(P):
    """Directed edges (i, j) = i sends to j: a path 0->1->..->P-1, a self-loop on
    every rank and chords 0->j; so rank 0's out-degree exceeds its in-degree."""
    edges = {(i, i + 1) for i in range(P - 1)} | {(i, i) for i in range(P)} | {(0, j) for j in range(2, P)}
    return sorted(edges)


def node_value(j):
    """Rank j's vector in the neighbour exchange (float64, integer-valued)."""
    return (np.arange(5) + 10 * j).astype(np.float64)


def weight(i, j):
    """W[i, j] of the test's mixing matrix (integers, so W @ X is exact)."""
    return float(i + 2 * j + 1)


def agv_len(r):
    """Length of rank r's allgatherv payload: differs per rank, 0 on rank 1."""
    return 0 if r == 1 else r + 2


def read_only(a):
    try:
        a[...] = 0
    except ValueError:
        return True
    return False


def check_all(c, res):
    r, P = c.rank, c.size

    # allgatherv: two dtypes, a different length per rank, an empty one on rank 1
    x32 = (np.arange(agv_len(r)) + 100 * r).astype(np.float32)
    x64 = -(np.arange(agv_len(r)) + 100 * r).astype(np.int64)
    res["agv_f32"] = [p.tolist() for p in c.allgatherv(x32)]
    req = c.iallgatherv(x64)
    res["agv_locked"] = read_only(x64)
    req.wait()
    res["agv_unlocked"] = bool(x64.flags.writeable)
    res["agv_i64"] = [p.tolist() for p in req.result]
    res["agv_dtypes"] = sorted({str(p.dtype) for p in req.result})
    for key, bad, err in (("dtype_error", np.zeros(2, np.float64 if r == 0 else np.float32), TypeError),
                          ("shape_error", np.zeros((2, 2) if r == P - 1 else 4, np.float32), ValueError)):
        try:
            c.allgatherv(bad)
        except err as e:
            res[key] = str(e)

    # neighbour exchange on a directed graph; sources in descending order (rows follow them)
    edges = graph_edges(P)
    sources = sorted((i for i, j in edges if j == r), reverse=True)
    dests = [j for i, j in edges if i == r]
    g = c.graph(sources, dests, weights=[weight(r, j) for j in sources])
    rows = c.neighbor_allgather(g, node_value(r))
    res["rows"] = rows.tolist()
    res["mix"] = (g.weights @ rows).tolist()
    x = node_value(r).astype(np.int64)
    req = c.ineighbor_allgather(g, x)
    res["nb_locked"] = read_only(x)
    req.wait()
    res["imix"] = (g.weights @ req.result).tolist()
    res["degrees"] = [g.in_degree, g.out_degree]
    try:  # rank 0 claims an edge 0 -> P-1 that rank P-1 does not list
        c.graph([], [P - 1] if r == 0 else [])
    except ValueError as e:
        res["graph_error"] = str(e)

    # point to point with a peer that changes every step
    res["sendrecv"], res["exchange"], res["peers"] = [], [], []
    for step in range(2 * P):
        s = 1 + step % (P - 1)  # rotating ring offset 1..P-1
        got = c.sendrecv(np.full(3, 1000 * r + step, np.int64), (r + s) % P, (r - s) % P)
        res["sendrecv"].append(got.tolist())
        peer = (step - r) % P  # a mutual pairing that changes every step (self when 2r = step mod P)
        send = np.full(2, 1000 * r + step, np.int32)
        req = c.iexchange(send, peer)
        res["peers"].append(peer)
        if step == 0:
            res["ex_locked"] = read_only(send)
        while c.progress():
            pass
        res["exchange"].append(req.result.tolist())

    # broadcasts (blocking from the last rank, nonblocking float16 from rank 0)
    b = np.arange(6, dtype=np.int32) * (r == P - 1)
    c.bcast(b, root=P - 1)
    res["bcast"] = b.tolist()
    b16 = (np.arange(4) * (r == 0)).astype(np.float16)
    req = c.ibcast(b16, root=0)
    res["ibcast_locked"] = read_only(b16)
    req.wait()
    res["ibcast"] = b16.tolist()

    # scalar reductions and one allreduce (for the ring byte count)
    res["scalars"] = [c.allreduce_scalar(r + 1, op) for op in ("sum", "max", "min")]
    reqs = [c.iallreduce_scalar(r + 1, op) for op in ("sum", "max", "min")]
    c.wait_all()
    res["iscalars"] = [q.result for q in reqs]
    buf = np.full(10, r, np.float32)
    c.iallreduce(buf).wait()
    res["allreduce"] = buf.tolist()

    res["pending"] = c.pending()
    res["bytes_sent"] = c.bytes_sent
    res["stats"] = dict(c.stats)


def check_thread_progress(c, res):
    """The same requests complete when a background thread waits on them."""
    c = get_comm(progress="thread")
    r, P = c.rank, c.size
    q1 = c.iallgatherv(np.full(agv_len(r), r, np.int16))
    q2 = c.iexchange(np.array([r]), P - 1 - r)
    c.wait_all()
    res["thread_agv"] = [p.tolist() for p in q1.result]
    res["thread_exchange"] = q2.result.tolist()
    get_comm(progress="poll")


def check_emulation(c, res):
    """Emulated 1 GbE: every request completes no earlier than post + modelled time."""
    c = get_comm(network="1gbe")
    r, P = c.rank, c.size
    net = c.network
    x = np.ones(65536, np.float32)  # 256 KiB: about 2 ms per message on 1 GbE
    g = c.graph([(r - 1) % P], [(r + 1) % P])
    res["emulated"] = {}
    posts = {
        "allgatherv": (lambda: c.iallgatherv(x), net.allgatherv_time([x.nbytes] * P)),
        "neighbor": (lambda: c.ineighbor_allgather(g, x), net.neighbor_time(x.nbytes, 1)),
        "exchange": (lambda: c.iexchange(x, P - 1 - r), None),
        "bcast": (lambda: c.ibcast(np.ones(65536, np.float32)), net.bcast_time(x.nbytes, P)),
    }
    for name, (post, modelled) in posts.items():
        req = post()
        early = req.test()
        req.wait()
        if modelled is None:  # the middle rank of an odd P exchanges with itself: a free local copy
            modelled = 0.0 if P - 1 - r == r else net.message_time(x.nbytes)
        res["emulated"][name] = [early, req.complete_time - req.post_time, modelled]
    get_comm(network=None)


def main(mode, outdir):
    c = get_comm()
    res = {"rank": c.rank, "size": c.size}
    if mode == "bad-graph":  # rank 0 sends to 1, but rank 1 does not list 0 as a source
        c.graph([], [1] if c.rank == 0 else [])
        return
    check_all(c, res)
    check_thread_progress(c, res)
    check_emulation(c, res)
    res["pending_end"] = c.pending()
    Path(outdir, f"rank{c.rank}.json").write_text(json.dumps(res))


if __name__ == "__main__":
    run_or_abort(main, sys.argv[1], sys.argv[2])
