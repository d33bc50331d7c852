"""Worker for tests/test_compression.py: the communicator on P ranks.

``mpiexec -n P python tests/compression_worker.py OUTDIR``. Each rank writes
``OUTDIR/rank{r}.json``: what :func:`exchange` and :func:`gossip_exchange`
returned and the Comm's byte counters after each; the test recomputes the
expected values with plain NumPy. Rank j's vector is :func:`vec` (j); its
top-k payload keeps ``k_of(j)`` entries, 0 on rank 0 (an empty payload).
"""
import json
import sys
from pathlib import Path

import numpy as np

from minips.distributed.comm import get_comm, run_or_abort

D = 50


def vec(j):
    return np.random.default_rng(100 + j).standard_normal(D).astype(np.float32)


def k_of(j):
    return 3 * j


def counters(comm):
    return {k: int(v) for k, v in comm.stats.items()}


def main(outdir):
    from minips.distributed.compression import Payload, exchange, gossip_exchange, make_compressor
    comm = get_comm()
    r, P = comm.rank, comm.size
    out = {}
    topk = make_compressor("topk", k=max(1, k_of(r)))
    p = topk.compress(vec(r), 0)
    if k_of(r) == 0:  # nothing to send on this rank: an empty payload
        p = Payload((p.arrays[0][:0], p.arrays[1][:0]), D, 0)
    before = counters(comm)
    out["topk_mean"] = exchange(comm, topk, p).tolist()
    after = counters(comm)
    out["topk_nbytes"] = topk.nbytes(p)
    out["topk_counted"] = after["allgatherv_bytes"] - before["allgatherv_bytes"]
    out["topk_sent"] = after["allgatherv_sent"] - before["allgatherv_sent"]

    for spec in ("randomk:ratio=0.2:seed=1", "identity", "countsketch:rows=3:cols=20"):
        c = make_compressor(spec)
        p = c.compress(vec(r), 5)
        before = counters(comm)
        out[spec] = exchange(comm, c, p).tolist()
        after = counters(comm)
        out[spec + " nbytes"] = c.nbytes(p)
        out[spec + " counted"] = after["allreduce_bytes"] - before["allreduce_bytes"]

    if P > 1:  # a ring: in-neighbours r-1, r+1 (one neighbour, twice listed, at P = 2: use a set)
        nbrs = sorted({(r - 1) % P, (r + 1) % P})
        graph = comm.graph(nbrs, nbrs)
        out["nbrs"] = nbrs
        for name, c, pay in (("gossip_topk", topk, p_topk(topk, r)),
                             ("gossip_identity", make_compressor("identity"), None)):
            pay = pay if pay is not None else c.compress(vec(r), 0)
            before = counters(comm)
            got = gossip_exchange(comm, graph, c, pay)
            after = counters(comm)
            out[name] = [g.tolist() for g in got]
            out[name + " sent"] = after["neighbor_allgather_sent"] - before["neighbor_allgather_sent"]
            out[name + " nbytes"] = c.nbytes(pay)
    Path(outdir, f"rank{r}.json").write_text(json.dumps(out))


def p_topk(topk, r):
    from minips.distributed.compression import Payload
    p = topk.compress(vec(r), 0)
    return p if k_of(r) else Payload((p.arrays[0][:0], p.arrays[1][:0]), D, 0)


if __name__ == "__main__":
    run_or_abort(main, sys.argv[1])
