# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Step 12: Gossip: talk to your neighbours, not to everyone
#
# **What you will learn**
#
# - the **mixing matrix** W of a communication graph: one gossip round replaces every
#   node's vector by a weighted average of its neighbours', `x_i <- sum_j W_ij x_j`; why W
#   must be **doubly stochastic** (and symmetric, for the usual theory), and the
#   Metropolis-Hastings weights that make it so (exercise 12.1);
# - the **spectral gap** `1 - |lambda_2(W)|`: how fast plain gossip reaches the average,
#   measured with minips' averaging lab on a ring, a torus, the exponential graph and the
#   complete graph, and what the accelerated (shift-register) variant gains;
# - **push-sum** (Kempe et al., FOCS 2003), which averages on directed graphs by carrying a
#   weight next to each value (exercise 12.2);
# - **D-PSGD** (Lian et al., NeurIPS 2017): SGD in which every rank mixes its weights with
#   its neighbours' instead of an allreduce, on a ring and on the complete graph, under
#   `mpiexec`; the **consensus distance** it leaves between the ranks;
# - **Gossip-PGA** (Chen et al., ICML 2021): gossip SGD with a global average every H steps,
#   and what that average does to the consensus distance.
#
# **Runs in**: one process (it launches `mpiexec -n 8` itself in section 6), from 25 s
# (load average 3-5) to two minutes (load 21) on a 2-core machine. **Files to read alongside**: `minips/distributed/topology.py`,
# `minips/averaging/` (`plain.py`, `accelerated.py`, `push_sum.py`, `lab.py`),
# `minips/distributed/algorithms/d_psgd.py`, `gossip_pga.py`, `docs/gossip.md` and
# `docs/distributed.md` (section "Gossip (decentralized) methods").

# %%
import csv
import inspect
import json

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import NullLocator

from _common import exercise, minips_cli, mpiexec, out_dir, pick, say, show
from minips.labs.averaging import simulate
from minips.compare import run_folder
from minips.distributed.algorithms.d_psgd import DPSGD
from minips.distributed.algorithms.gossip_pga import GossipPGA
from minips.distributed.topology import make_topology

OUT = out_dir("12")
np.set_printoptions(precision=3, suppress=True, linewidth=110)

# %% [markdown]
# ## 1. The mixing matrix
#
# In steps 5-11 every rank received the average of all ranks (an allreduce). Gossip drops
# that: rank i talks only to its **neighbours** in a graph, and one gossip round is
#
#     x_i <- sum_j W_ij x_j        (W_ij > 0 only for j = i and the neighbours j of i)
#
# For this to average, W must have three properties:
#
# - **rows sum to 1**: if every rank holds the same vector, it stays (a weighted average);
# - **columns sum to 1**: `sum_i x_i` is kept, so the mean is kept; with rows too, W is
#   **doubly stochastic**;
# - the graph is connected: then `W^t -> 11^T / P` and every rank reaches the mean. How
#   fast is set by `|lambda_2(W)|`, the second-largest eigenvalue modulus: the part of
#   `x - mean` that decays slowest shrinks by that factor per round. `1 - |lambda_2|` is the
#   **spectral gap**.
#
# minips builds W with **Metropolis-Hastings** weights (Xiao & Boyd 2004): on each edge
# `W_ij = 1 / (1 + max(deg_i, deg_j))`, with `deg` a node's number of (distinct)
# neighbours, and the self weight `W_ii = 1 - sum_{j != i} W_ij`. W is then symmetric and
# doubly stochastic on any undirected graph. Here are the ring and the complete graph on 8
# ranks (`python -m minips topology ring -n 8` prints them):

# %%
for name in ("ring", "complete", "exponential"):
    top = make_topology(name, 8)
    say(f"--- {name}, P = 8: degree {top.degree(0)}, |lambda_2| = {1 - top.spectral_gap():.4f}, "
        f"spectral gap {top.spectral_gap():.4f}")
    if name != "exponential":
        say(top.W)

# %% [markdown]
# The ring's W is **circulant** (row i is row 0 shifted by i), so its eigenvalues are the
# discrete Fourier transform of row 0: `1/3 + (2/3) cos(2 pi k / P)`, k = 0 ... P-1. The
# largest after 1 is k = 1: `|lambda_2| = 1/3 + 2/3 cos(2 pi / P) ~ 1 - (4 pi^2 / 3) / P^2`, so
# the gap shrinks as `1/P^2`: a ring of 8 has gap 0.195, a ring of 64 only 0.0032. The
# complete graph's `W = 11^T / P` has gap 1: one round is the exact average (an allreduce,
# paid with P - 1 messages per rank).
#
# ## 2. Exercise 12.1: the ring's mixing matrix
#
# Write `ring_mixing_matrix(P)`: the Metropolis-Hastings W of the ring, a (P, P) float64
# NumPy array, in which rank i is linked with `i - 1` and `i + 1` (mod P). For P >= 3 every
# rank has two neighbours, so every nonzero weight is 1/3. **Careful with P = 2**: there
# `i - 1` and `i + 1` are the same rank, so the ring has one edge and each rank one
# neighbour. The check tries every P this step uses (2 to 64).

# %%
def ring_mixing_matrix(P):
    """(P, P) float64 Metropolis-Hastings mixing matrix of the ring on P ranks."""
    raise NotImplementedError  # your code here


# %%
ring_mixing_matrix = exercise("12.1", ring_mixing_matrix)
for P in (2, 3, 8):
    W = ring_mixing_matrix(P)
    say(f"P = {P}: rows sum to {W.sum(axis=1).min():.3f}..{W.sum(axis=1).max():.3f}, columns to "
        f"{W.sum(axis=0).min():.3f}..{W.sum(axis=0).max():.3f}, symmetric: {np.allclose(W, W.T)}, "
        f"the same as minips' ring: {np.allclose(W, make_topology('ring', P).W)}")
W8 = ring_mixing_matrix(8)
eig = np.sort(np.linalg.eigvalsh(W8))[::-1]
formula = np.sort(1 / 3 + 2 / 3 * np.cos(2 * np.pi * np.arange(8) / 8))[::-1]
say(f"eigenvalues of the ring's W, P = 8: {eig}\n1/3 + 2/3 cos(2 pi k / 8), sorted:  {formula}")
assert np.allclose(eig, formula)

# %% [markdown]
# ## 3. The spectral gap decides: the averaging lab
#
# `minips.averaging` runs **averaging** alone (no training): n nodes start with random
# values and gossip; the lab measures the relative error `||x(t) - mean|| / ||x(0) - mean||`
# each round, the rounds to reach 1e-6, and the rounds the spectrum predicts,
# `ln(1e-6) / ln |lambda_2|` (`docs/gossip.md`). Plain gossip is `x <- W x`
# (`minips/averaging/plain.py`); the **accelerated** variant (shift-register gossip, Liu et
# al., Automatica 2013) mixes in the previous round, `x(t+1) = alpha W x(t) + (1 - alpha)
# x(t-1)` with `alpha = 2 / (1 + sqrt(1 - lambda_2^2))`, which turns the per-round factor
# `|lambda_2|` into `sqrt(alpha - 1)`: a gap of about `sqrt(2 (1 - |lambda_2|))` instead of
# `1 - |lambda_2|`. The command-line lab on a ring of 32:

# %%
minips_cli(["gossip-lab", "--topology", "ring", "-n", 32, "--method", "plain,accelerated",
            "--rounds", pick(1200, 200), "--out", OUT / "lab"])

# %% [markdown]
# The same from Python (`minips.labs.averaging.simulate`), for four graphs and growing n,
# each run stopped at 1e-6:

# %%
ns = pick((8, 16, 32, 64, 128), (8, 16, 32))
graphs = ("ring", "torus", "exponential", "complete")
lab = {}
say(f"{'graph':12s} {'n':>4s} {'gap':>8s} {'plain: rounds':>14s} {'(predicted)':>11s} {'accelerated':>12s}")
for g in graphs:
    for n in ns:
        r = simulate("plain", g, n=n, rounds=20000, stop_at=1e-6)
        a = simulate("accelerated", g, n=n, rounds=20000, stop_at=1e-6) if g != "complete" else None
        lab[g, n] = (r, a)
        say(f"{g:12s} {n:4d} {r['spectral_gap']:8.4f} {r['rounds_to_1e-6']:14d} "
            f"{r['rounds_to_1e-6_predicted']:11d} {a['rounds_to_1e-6'] if a else '-':>12}")

# %%
n_show = 32
fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.4))
for k, g in enumerate(graphs[:3]):                      # the complete graph: 0 after round 1, off the log scale
    r, acc = lab[g, n_show]
    rel = np.array(r["relative_error"])
    rel[rel <= 0] = np.nan
    a1.semilogy(rel, color=f"C{k}", label=f"{g}, plain")
    if acc is not None and g == "ring":
        rel = np.array(acc["relative_error"])
        a1.semilogy(rel, color=f"C{k}", ls="--", label=f"{g}, accelerated")
a1.axhline(1e-6, color="grey", lw=0.8, ls=":")
a1.set_xlabel("round")
a1.set_ylabel("||x(t) - mean|| / ||x(0) - mean||")
a1.set_title(f"gossip averaging on {n_show} nodes (complete: exact after round 1)")
a1.set_xlim(0, lab["ring", n_show][0]["rounds_to_1e-6"] + 10)
a1.grid(alpha=0.3, which="both")
a1.legend(fontsize=8)
for k, g in enumerate(graphs[:3]):
    a2.loglog(ns, [lab[g, n][0]["rounds_to_1e-6"] for n in ns], "o-", color=f"C{k}", label=f"{g}, plain")
    if g == "ring":
        a2.loglog(ns, [lab[g, n][1]["rounds_to_1e-6"] for n in ns], "s--", color=f"C{k}", label=f"{g}, accelerated")
gap = np.array([lab["ring", n][0]["spectral_gap"] for n in ns])
a2.loglog(ns, np.log(1e6) / gap, ":", color="k", lw=1, label="ln(1e6) / gap, ring")
a2.set_xticks(ns, [str(n) for n in ns])
a2.set_xlabel("nodes n")
a2.set_ylabel("rounds to 1e-6")
a2.set_title("the ring's gap shrinks as 1/n^2")
a2.grid(alpha=0.3, which="both")
a2.legend(fontsize=8)
fig.suptitle("the spectral gap sets the speed of gossip averaging (minips.labs.averaging)")
fig.tight_layout()
show(fig, OUT / "spectral_gap.png")

# %% [markdown]
# What to see: the rounds to 1e-6 follow `ln(1e6) / gap` (the dotted line; the measured
# counts sit a little below because a random start has little weight on the slowest mode).
# The ring needs about four times more rounds each time n doubles; the torus (gap ~ 1/n)
# and above all the exponential graph (rank i linked with i +- 2^k: about `2 log2 n`
# neighbours, gap falling only slowly) stay fast. The complete graph is exact after one round. The
# accelerated ring needs about ten times fewer rounds than the plain one at n = 32 and the
# gain grows with n, for one stored vector per node.
#
# ## 4. Push-sum: averaging on a directed graph
#
# A doubly stochastic W needs every link to work both ways with the same weight. On a
# **directed** graph (i can send to j but not hear from j) that is generally impossible.
# Push-sum (Kempe, Dobra & Gehrke, FOCS 2003) keeps, at every node, a value `x_i` and a
# **weight** `w_i` (start: `x_i` = the node's value, `w_i = 1`). Each round, node i with
# k_i out-neighbours:
#
# 1. splits its pair into `k_i + 1` equal shares, `(x_i, w_i) / (k_i + 1)`;
# 2. keeps one share and sends one to each out-neighbour;
# 3. sums its kept share and everything it receives: the new `(x_i, w_i)`.
#
# Its estimate of the mean is `x_i / w_i`. The matrix of this round is **column**
# stochastic (what node i sends adds up to what it had), so `sum_i x_i` and `sum_i w_i` are
# kept, and on a strongly connected graph every ratio `x_i / w_i` converges to
# `sum x / sum w`, the mean.
#
# ## 5. Exercise 12.2: the push-sum round
#
# Write `push_sum_step(x, w, out_neighbors)`: `x` is (n, d) float64 (row i is node i's
# value), `w` is (n,), `out_neighbors[i]` the list of nodes node i sends to (not
# containing i). Return the new `(x, w)` after one round, as new arrays (do not modify
# `x` or `w`), the numerators `x`, not the estimates.

# %%
def push_sum_step(x, w, out_neighbors):
    """One push-sum round: returns the new (x (n, d), w (n,))."""
    raise NotImplementedError  # your code here


# %%
push_sum_step = exercise("12.2", push_sum_step)

# %% [markdown]
# Now run your round on a directed graph whose nodes send to different numbers of nodes,
# against the obvious alternative: each node **pulls**, averaging itself and the nodes that
# send to it (rows of W sum to 1, columns do not).

# %%
out_nbrs = [[1, 2, 3, 4, 5], [2], [3], [4], [5], [0]]   # node 0 sends to everyone, the others to one node
n_nodes = len(out_nbrs)
in_nbrs = [[j for j in range(n_nodes) if i in out_nbrs[j]] for i in range(n_nodes)]
x0 = np.random.default_rng(3).standard_normal((n_nodes, 1))
x, w, xp = x0.copy(), np.ones(n_nodes), x0.copy()
err_push, err_pull = [], []
for _ in range(60):
    x, w = push_sum_step(x, w, out_nbrs)
    xp = np.array([xp[[i, *in_nbrs[i]]].mean(axis=0) for i in range(n_nodes)])   # pull: row stochastic
    err_push.append(np.abs(x / w[:, None] - x0.mean()).max())
    err_pull.append(np.abs(xp - x0.mean()).max())
say(f"true mean {x0.mean():.6f}\npush-sum estimates after 60 rounds: {(x / w[:, None]).ravel()}"
    f"\npull-averaging after 60 rounds:     {xp.ravel()}")
say(f"largest error: push-sum {err_push[-1]:.2e}, pull-averaging {err_pull[-1]:.2e}")

# %% [markdown]
# Pull-averaging **agrees**, but on the wrong value: a weighted mean in which each node
# counts by how much the others listen to it (the left eigenvector of its row-stochastic
# matrix). Push-sum's weight `w_i` measures exactly that bias and the ratio removes it.
# On the lab's directed ring minips' push-sum (`minips/averaging/push_sum.py`) and yours
# follow the same trajectory:

# %%
n_ring = 16
ref = simulate("push-sum", "directed-ring", n=n_ring, rounds=40, keep_history=True)
x = ref["history"][:, 0].copy()           # the same starting values as the lab's run
w = np.ones(n_ring)
for _ in range(40):
    x, w = push_sum_step(x, w, [[(i + 1) % n_ring] for i in range(n_ring)])
say(f"after 40 rounds on a directed ring of {n_ring}: largest difference to minips' push-sum "
    f"{np.abs(x / w[:, None] - ref['history'][:, -1]).max():.1e}; relative error {ref['relative_error'][-1]:.2e} "
    f"(|lambda_2| of the push matrix {ref['rate_predicted']:.4f} per round)")

# %% [markdown]
# ## 6. D-PSGD: SGD with gossip instead of allreduce
#
# **D-PSGD** (Lian et al., NeurIPS 2017) replaces sync's gradient allreduce by one gossip
# round on the **weights**: each rank takes its own gradient and mixes its weights with its
# neighbours'. minips implements both orders: `form=cta` (combine then adapt, the paper's
# rule and the default: `w_i <- opt(mix(w)_i, g_i)`, the exchange posted before the forward
# pass so that it overlaps the computation) and `form=atc` (adapt then combine:
# `w_i <- mix(opt(w_i, g_i))_i`, blocking). The step:

# %%
say(inspect.getsource(DPSGD.step))

# %% [markdown]
# The ranks now hold **different** weights. How far apart they are is the **consensus
# distance** `(1/P) sum_i ||w_i - mean w||^2`; the Trainer logs it (`--consensus-every`)
# and evaluates the **averaged** model. Two facts to check below:
#
# - on the **complete graph**, `W = 11^T / P`, so one mixing round is the average: the atc
#   form is then exactly synchronous SGD (`tests/test_d_psgd.py::
#   test_complete_graph_atc_equals_sync_and_cta_does_not` pins it down; cta is not, since
#   each rank applies its own gradient after the average);
# - on the ring the ranks drift apart, by an amount set by the spectral gap.
#
# `compare` runs them one after the other, same data and seed, on 8 ranks (the MLP on the
# mini Fashion-MNIST set, 2 epochs, a constant learning rate so that the drift does not
# fade with it, the consensus distance after every step). 8 processes on a laptop share
# its cores: read accuracy, traffic and consensus, not time. Gossip-PGA (section 7) is in
# the same run.

# %%
P = pick(8, 4)
algos = ("sync,d-psgd:topology=complete:form=atc@complete-atc,d-psgd:topology=ring:form=atc@ring-atc,"
         "d-psgd:topology=ring@ring-cta,gossip-pga:period=4:topology=ring@pga-4")
mpiexec(P, ["-m", "minips", "compare", "--algos", algos, "--model", "mlp", "--epochs", 2, "--schedule", "constant",
            "--consensus-every", 1, "--out", OUT / "compare", "--quiet", "--overwrite",
            *pick([], ["--max-steps", 8, "--no-figures"])], quiet=True)
summaries = json.loads((OUT / "compare" / "compare.json").read_text())
base = summaries[0]["bytes_sent_per_step"]
say(f"{'run':13s} {'test acc':>8s} {'test loss':>9s} {'MiB/step':>9s} {'vs sync':>8s} {'consensus at end':>17s}")
for s in summaries:
    cons = s.get("consensus_distance")
    say(f"{s['label']:13s} {s['test_accuracy']:8.4f} {s['test_loss']:9.4f} {s['bytes_sent_per_step'] / 2**20:9.3f} "
        f"{s['bytes_sent_per_step'] / base:8.2f} {'-' if cons is None else f'{cons:.3g}':>17s}")


def trace(label, col):
    with open(run_folder(OUT / "compare", label) / "trace.csv") as f:
        return np.array([float(r[col]) for r in csv.DictReader(f)])


loss_sync, loss_complete = trace("sync", "loss"), trace("complete-atc", "loss")
gap_loss = np.max(np.abs(loss_sync - loss_complete) / np.abs(loss_sync))
cons_complete = trace("complete-atc", "consensus_distance").max()
say(f"sync vs d-psgd on the complete graph (atc): largest relative difference of rank 0's training loss over "
    f"{len(loss_sync)} steps {gap_loss:.1e} (float32 rounding: the allreduce and the neighbour sums add in "
    f"different orders); consensus distance of complete-atc: at most {cons_complete:.1e}")
assert gap_loss < 1e-4

# %%
fig, ax = plt.subplots(figsize=(9, 4.3))
for label, style in (("ring-cta", "-"), ("ring-atc", "-"), ("pga-4", "-")):
    c = trace(label, "consensus_distance")
    ax.semilogy(np.arange(len(c)), np.where(c > 0, c, np.nan), style, lw=1.2, marker="." if label == "pga-4" else None,
                label=label)
ax.set_xlabel("step")
ax.set_ylabel("consensus distance (log scale)")
ax.set_title(f"{P} ranks: the drift between the ranks' models (complete-atc and sync: 0)")
ax.grid(alpha=0.3, which="both")
ax.legend()
fig.tight_layout()
show(fig, OUT / "consensus_training.png")

# %% [markdown]
# Reading the table (2 epochs = 78 steps, one seed). **complete-atc** reproduces sync
# (the same test accuracy and loss, consensus 0) but each rank sends its weights to all
# `P - 1` others every step: when we ran it, 5.44 MiB per step against sync's 1.36 (4x at
# P = 8). The **ring** sends two copies, 1.55 MiB (a little more than sync's ring allreduce,
# `2 (P - 1) / P` copies), and that stays two whatever P is, while an allreduce's latency
# grows with P: this is where gossip wins on a large cluster (step 10's cost model;
# `docs/results.md`, section 8.3). The price is the drift: the ranks' models differ, most
# in the first steps, when the gradients are large, then settling (here at about 0.06 for
# ring-atc). It did not cost accuracy on this small problem: when we ran it, sync and
# complete-atc reached 0.8270, ring-atc 0.8295, ring-cta 0.8265 and Gossip-PGA 0.8300, all
# within what another seed changes (`docs/results.md`, section 8.1, has the ConvNet at
# P = 8, IID and non-IID data). cta's distance is about twice atc's: it is measured right
# after each rank's own step, which cta applies after the mix.
#
# ## 7. Gossip-PGA: a global average every H steps
#
# Gossip-PGA (Chen et al., ICML 2021) runs atc gossip SGD and, every H-th step, replaces
# the gossip round by an **allreduce** of the weights:

# %%
say(inspect.getsource(GossipPGA.step))
say(inspect.getsource(GossipPGA.global_average))

# %% [markdown]
# In the figure above (`pga-4`) the consensus distance drops to 0 at every 4th step (the
# point is missing on the log scale) and climbs back over the 3 gossip steps in between.
# That is the whole idea: on a ring the drift that gossip SGD keeps grows with P (the
# slowest mode of W decays by `|lambda_2| ~ 1 - 4.4 / P^2` per round), while a global average
# every H steps caps it at about H steps' worth, whatever P. A simulation shows it without
# any network: P ranks on a ring whose gradients are pure noise (the part of each rank's
# gradient that differs from the others'), `w_i <- mix(w - lr xi)_i` (atc gossip SGD), and
# the same with every H-th mix replaced by the average. For gossip the steady state is
# known: each eigenvalue lambda_k of W adds `lr^2 d lambda_k^2 / (1 - lambda_k^2)` to
# `P x` the consensus distance (a geometric sum over the past steps), the prediction line.

# %%
def drift(W, steps, H=None, lr=0.1, d=64, seed=0):
    """Consensus distance after each step of atc gossip SGD on pure-noise gradients
    (every H-th step an exact average when H is given)."""
    rng = np.random.default_rng(seed)
    X = np.zeros((W.shape[0], d))
    out = []
    for t in range(steps):
        X = X - lr * rng.standard_normal(X.shape)            # each rank's own (noise) step
        X = np.tile(X.mean(axis=0), (len(X), 1)) if H and (t + 1) % H == 0 else W @ X
        out.append(np.mean(np.sum((X - X.mean(axis=0)) ** 2, axis=1)))
    return np.array(out)


Ps, H, steps_sim, lr = pick((8, 16, 32, 64), (8, 16)), 8, pick(3000, 400), 0.1
sim = {}
say(f"{'P':>3s} {'gap':>7s} {'gossip: mean consensus':>23s} {'(predicted)':>11s} {'PGA, H = 8':>11s}")
for P_ in Ps:
    W = ring_mixing_matrix(P_)
    lam = np.sort(np.linalg.eigvalsh(W))[:-1]               # all but the eigenvalue 1
    pred = lr**2 * 64 * np.sum(lam**2 / (1 - lam**2)) / P_
    g, p = drift(W, steps_sim), drift(W, steps_sim, H=H)
    sim[P_] = (g, p, pred)
    half = steps_sim // 2                                    # the second half: past the transient
    say(f"{P_:3d} {1 - lam.max():7.4f} {g[half:].mean():23.3g} {pred:11.3g} {p[half:].mean():11.3g}")

# %%
fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.3))
P_big = 32 if 32 in sim else Ps[-1]
g, p, pred = sim[P_big]
a1.plot(g[:200], label="gossip SGD (atc)")
a1.plot(p[:200], label=f"Gossip-PGA, H = {H}")
a1.axhline(pred, color="k", ls=":", lw=1, label="gossip steady state, predicted")
a1.set_xlabel("step")
a1.set_ylabel("consensus distance")
a1.set_title(f"ring of {P_big}, noise-only gradients: the first 200 steps")
a1.grid(alpha=0.3)
a1.legend(fontsize=8)
a2.semilogx(Ps, [sim[q][0][steps_sim // 2:].mean() for q in Ps], "o-", label="gossip SGD, measured")
a2.semilogx(Ps, [sim[q][2] for q in Ps], "k:", label="gossip SGD, predicted")
a2.semilogx(Ps, [sim[q][1][steps_sim // 2:].mean() for q in Ps], "s-", label=f"Gossip-PGA, H = {H}, measured")
a2.set_xticks(Ps, [str(q) for q in Ps])
a2.xaxis.set_minor_locator(NullLocator())
a2.set_ylim(bottom=0)
a2.set_xlabel("ranks P (ring)")
a2.set_ylabel("mean consensus distance")
a2.set_title("gossip's drift grows with P; PGA's does not")
a2.grid(alpha=0.3, which="both")
a2.legend(fontsize=8)
fig.suptitle("what the periodic global average does to the consensus distance")
fig.tight_layout()
show(fig, OUT / "pga_consensus.png")

# %% [markdown]
# What to see: gossip's steady drift matches the prediction and grows with P (the ring's
# slow modes keep the noise of many past steps: 0.32 at P = 8, 4.8 at P = 64 when we ran
# it), while Gossip-PGA's sawtooth resets every H steps and its mean levels off (0.22 to
# 0.46). It can never pass the noise of H - 1 steps, `lr^2 d (H - 1) / 2 = 2.24` on
# average here, even with no mixing at all. The cost: one allreduce every H steps, whose
# latency term grows with P (step 10), against a neighbour exchange whose cost does not.
# Chen et al. prove that the periodic average removes most of the slowdown a small
# spectral gap causes gossip SGD (a much shorter transient phase before it converges like
# sync); `docs/results.md` (section 8) measures Gossip-PGA on the ConvNet.
#
# **Try**: `python -m minips gossip-lab --topology ring -n 64 --method all --rounds 3000`
# (every averaging method on one ring, `docs/gossip.md`), or
# `mpiexec -n 8 python -m minips compare --algos d-psgd:topology=exponential,sgp,gossip-pga:period=8 --model mlp`.
#
# **Where next**: step 13 compresses what is sent instead of sending it less often or to
# fewer ranks. `python -m minips algorithms` lists every method with its options.
