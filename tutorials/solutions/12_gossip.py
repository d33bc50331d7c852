"""Reference solutions of step 12 (tutorials/12_gossip.py)."""
import numpy as np


# Exercise 12.1
def ring_mixing_matrix(P):
    adj = np.zeros((P, P), dtype=bool)
    for i in range(P):
        for j in ((i - 1) % P, (i + 1) % P):
            if j != i:
                adj[i, j] = adj[j, i] = True        # with P = 2 both are rank 1 - i: one edge
    deg = adj.sum(axis=1)                           # distinct neighbours
    W = np.where(adj, 1.0 / (1.0 + np.maximum.outer(deg, deg)), 0.0)   # Metropolis-Hastings
    W[np.diag_indices(P)] = 1.0 - W.sum(axis=1)     # the self weight: what is left
    return W


# Exercise 12.2
def push_sum_step(x, w, out_neighbors):
    x, w = np.asarray(x, dtype=float), np.asarray(w, dtype=float)
    new_x, new_w = np.zeros_like(x), np.zeros_like(w)
    for i, nbrs in enumerate(out_neighbors):
        share = 1.0 / (len(nbrs) + 1)               # k_i + 1 shares: one kept, one per out-neighbour
        for j in [i, *nbrs]:
            new_x[j] += share * x[i]
            new_w[j] += share * w[i]
    return new_x, new_w
