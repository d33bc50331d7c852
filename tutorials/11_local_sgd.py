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
# # Step 11: Local SGD: average the models, not the gradients, every H steps
#
# **What you will learn**
#
# - **local SGD** (Stich, "Local SGD Converges Fast and Communicates Little", ICLR 2019):
#   every rank takes H plain SGD steps on its own data, then the ranks **average their
#   weights** with one allreduce. Traffic per step falls by H; the ranks' models drift apart
#   in between;
# - why H = 1 is exactly synchronous SGD (without momentum), checked to the last bit;
# - what H does to accuracy and traffic, on a problem where everything is visible and on
#   the ConvNet under `mpiexec`;
# - the **consensus distance** `(1/P) sum_i ||w_i - mean w||^2`, the drift that H buys, and
#   why different data on each rank makes it grow;
# - **post-local SGD** (Lin et al., ICLR 2020: synchronous first, local later) and the
#   stagewise schedule of **STL-SGD** (Shen et al., AAAI 2021: the period grows as the
#   learning rate falls).
#
# **Runs in**: one process (it launches `mpiexec -n 2` itself in section 4), about two
# minutes on idle cores. **Files to read alongside**:
# `minips/distributed/algorithms/local_sgd.py`, `post_local_sgd.py`, `stl_sgd.py`,
# `minips/distributed/algorithms/base.py` (`average_model`), `docs/distributed.md`
# (section "Local-update methods").

# %%
import inspect
import json

import matplotlib.pyplot as plt
import numpy as np

from _common import exercise, mpiexec, out_dir, pick, say, show
from minips.distributed.algorithms.base import Algorithm
from minips.distributed.algorithms.local_sgd import LocalSGD
from minips.distributed.algorithms.stl_sgd import STLSGD

OUT = out_dir("11")

# %% [markdown]
# ## 1. The rule
#
# Every rank i keeps its own weights `w_i` and its own optimizer. Step t:
#
# 1. `g_i = grad f_i(w_i)` on rank i's mini-batch (forward + backward);
# 2. `w_i = w_i - lr g_i` (a **local** step: no message);
# 3. every H steps: `w_i = (1/P) sum_j w_j` for every i (one allreduce of the weights).
#
# Between averages the ranks hold different weights, so minips' Trainer evaluates the
# **averaged** model and logs the consensus distance. Here is the step, and the averaging
# it calls (shared by every method that averages models):

# %%
say(inspect.getsource(LocalSGD.step))
say(inspect.getsource(Algorithm.average_model))

# %% [markdown]
# ## 2. Exercise 11.1: the averaging step
#
# Write the averaging on P simulated ranks held in one array: `W` has shape `(P, d)`,
# row i is rank i's weights. Return a new `(P, d)` float64 array in which **every** row is
# the mean of the rows of `W` (what `allreduce` + divide by P leaves on every rank). Do not
# modify `W`, and do not assume a particular P. The simulation below keeps stepping each
# row in place, so the rows must be writable and each its own (not a read-only or
# stride-0 view such as `np.broadcast_to`'s).

# %%
def average_models(W):
    """(P, d) array -> (P, d) array whose every row is the mean of W's rows."""
    raise NotImplementedError  # your code here


# %%
average_models = exercise("11.1", average_models)

# %% [markdown]
# ## 3. H on a problem where everything is visible
#
# P = 8 simulated ranks minimise a least-squares loss `f(w) = (1/2m) ||A w - b||^2`, each
# with its own mini-batches of 8 rows, plain SGD (no momentum) and the same learning rate.
# Two kinds of data:
#
# - **iid**: every rank samples rows of the same A (the data-parallel case of steps 5-8);
# - **non-iid**: rank i's rows come from its own shifted targets `b + c_i` (the `c_i` sum
#   to zero, so the global problem is the same): the ranks pull towards different optima.
#
# We count the traffic in **averages** (one weight allreduce each) and record the
# consensus distance just before each average.

# %%
P, d, m = 8, 20, 400
rng = np.random.default_rng(0)
A = rng.standard_normal((m, d)) / np.sqrt(d)
w_star = rng.standard_normal(d)
b = A @ w_star + 0.05 * rng.standard_normal(m)
shift = rng.standard_normal((P, m))
shift -= shift.mean(axis=0)          # sum_i c_i = 0: the average of the local problems is f


def loss(w):
    r = A @ w - b
    return 0.5 * float(r @ r) / m


def local_sgd_sim(H, steps, lr=0.5, data="iid", seed=1):
    """Local SGD on P simulated ranks; returns (loss of the average per step, consensus
    distance before each average, number of averages)."""
    rs = np.random.default_rng(seed)
    W = np.zeros((P, d))
    losses, consensus, n_avg = [], [], 0
    for t in range(steps):
        for i in range(P):
            rows = rs.integers(0, m, 8)
            target = b[rows] + (0.3 * shift[i, rows] if data == "non-iid" else 0.0)
            W[i] -= lr * A[rows].T @ (A[rows] @ W[i] - target) / len(rows)   # a local SGD step
        if (t + 1) % H == 0:
            consensus.append(float(np.mean(np.sum((W - W.mean(axis=0)) ** 2, axis=1))))
            W = average_models(W)
            n_avg += 1
        losses.append(loss(W.mean(axis=0)))
    return np.array(losses), consensus, n_avg


steps = pick(400, 64)
Hs = (1, 4, 16, 64)
runs = {(data, H): local_sgd_sim(H, steps, data=data) for data in ("iid", "non-iid") for H in Hs}
say(f"{'data':8s} {'H':>3s} {'averages':>9s} {'final loss':>11s} {'mean consensus before avg':>26s}")
for (data, H), (ls, cons, n) in runs.items():
    say(f"{data:8s} {H:3d} {n:9d} {ls[-1]:11.5f} {np.mean(cons) if cons else float('nan'):26.3g}")

# %% [markdown]
# **H = 1 is synchronous SGD.** Averaging the weights after one plain SGD step from a common
# point is averaging the gradients: `mean_i (w - lr g_i) = w - lr mean_i g_i`. Check it:
# one synchronous run with the averaged gradient, against local SGD with H = 1 (the same
# batches, since both draw them from the same seed in the same order).

# %%
def sync_sim(steps, lr=0.5, seed=1):
    rs = np.random.default_rng(seed)
    w = np.zeros(d)
    out = []
    for _ in range(steps):
        g = np.zeros(d)
        for _rank in range(P):
            rows = rs.integers(0, m, 8)
            g += A[rows].T @ (A[rows] @ w - b[rows]) / len(rows)
        w -= lr * g / P
        out.append(loss(w))
    return np.array(out)


gap = np.max(np.abs(sync_sim(steps) - runs[("iid", 1)][0]) / runs[("iid", 1)][0])
say(f"largest relative difference of the loss, sync vs local SGD with H = 1: {gap:.2e} "
    "(rounding only: the sums run in a different order)")
assert gap < 1e-9

# %%
fig, (a, c) = plt.subplots(1, 2, figsize=(11, 4))
for H, style in zip(Hs, ("-", "--", "-.", ":")):
    a.semilogy(np.arange(1, steps + 1), runs[("non-iid", H)][0], style, lw=2 if H == 1 else 1.3, label=f"H = {H}")
a.set_title(f"loss of the averaged model, non-iid data, P = {P}")
a.set_xlabel("step")
a.set_ylabel("loss (log scale)")
a.grid(alpha=0.3, which="both")
a.legend()
for data, marker in (("iid", "o"), ("non-iid", "s")):
    c.loglog(Hs, [np.mean(runs[(data, H)][1]) for H in Hs], marker=marker, label=f"{data} data")
c.set_xticks(Hs, [str(H) for H in Hs])
c.set_xlabel("H (steps between averages)")
c.set_ylabel("mean consensus distance before an average")
c.set_title("the drift that H buys")
c.grid(alpha=0.3, which="both")
c.legend()
fig.suptitle("local SGD on least squares: 1/H of the averages, more drift, (almost) the same averaged model")
fig.tight_layout()
show(fig, OUT / "local_sgd_H.png")

# %% [markdown]
# What to see: the averages fall from one per step to one per 64 steps, the consensus
# distance just before an average grows with H (the ranks random-walk apart with their batch
# noise until the pull back towards the optimum balances it; different data per rank adds a
# systematic pull towards each rank's own optimum, 3-7x larger here, and keeps growing), and
# yet **the averaged model's loss
# hardly moves** (the curves lie on top of each other). That is special to this problem:
# the least-squares gradient is linear in w and every rank's rows have the same statistics
# (`E[A_r^T A_r]` is shared), so in expectation the average of the ranks' local steps is
# the step of the average, and the drift cancels in the mean. A neural network's gradient
# is not linear in its weights: there the drift costs accuracy, as the next section shows.
#
# ## 4. On the ConvNet, under `mpiexec`
#
# `compare` runs several algorithms one after the other on the same data and seed. Two
# ranks, one epoch of the mini Fashion-MNIST set, the emulated 1 GbE network of steps 4-8
# (so that sending matters): sync, local SGD with H = 4 and 16, and post-local SGD
# (synchronous for the first half of the run, then H = 16). The table reports the accuracy
# of the averaged model, the MiB each rank sent per step and the traffic relative to sync.

# %%
algos = "sync,local-sgd:period=4,local-sgd:period=16,post-local-sgd:period=16"
mpiexec(2, ["-m", "minips", "compare", "--algos", algos, "--model", pick("convnet", "mlp"), "--epochs", 1,
            "--network", "1gbe", "--out", OUT / "compare", "--quiet", "--overwrite",
            *pick([], ["--max-steps", 8, "--no-figures"])], quiet=True)
summaries = json.loads((OUT / "compare" / "compare.json").read_text())
base = summaries[0]["bytes_sent_per_step"]
say(f"{'algorithm':26s} {'test acc':>8s} {'MiB/step':>9s} {'vs sync':>8s} {'step ms':>8s} {'consensus':>10s}")
for s in summaries:
    cons = s.get("consensus_distance")
    say(f"{s['label']:26s} {s['test_accuracy']:8.4f} {s['bytes_sent_per_step'] / 2**20:9.3f} "
        f"{s['bytes_sent_per_step'] / base:8.3f} {1e3 * s['step_time_s']:8.1f} "
        f"{'-' if cons is None else f'{cons:.3g}':>10s}")

# %% [markdown]
# Read the table column by column. **MiB/step**: local SGD with H sends the model once per
# H steps, so 1/H of sync's traffic (the model and the gradient have the same size);
# post-local SGD sends sync's traffic for the first half and 1/16 after. **step ms** on the
# emulated 1 GbE network: the wait for the allreduce is paid every step by sync and every H
# steps by local SGD (on a busy machine this column is noisy: other processes steal the
# cores). **test acc**: one epoch is only about 150 steps (about 10 averages with H = 16),
# one seed: when we ran it, sync reached 0.817, H = 4 0.815, H = 16 0.806 and post-local
# SGD 0.819; differences of a few tenths of a point are within what another seed changes.
# `docs/results.md`, section "Local-update methods", has the 3-epoch
# study at P = 4 and 8 with 3 seeds.
#
# ## 5. Post-local SGD and STL-SGD: when to communicate more
#
# Both start communicating often and then less. **Post-local SGD** switches once, from
# synchronous to local (after `switch-step`, by default half the run): early training moves
# fast and benefits from exact averaging; late training is noise-dominated, where local
# steps are cheap and even act as a regulariser. **STL-SGD** goes in stages: stage s lasts
# `T_s = T_1 2^s` steps with learning rate `eta_1 / 2^s` and period `k_s`; the period
# doubles each stage with iid data (`k_s = k_1 2^s`) and grows by sqrt(2), rounded, with
# non-iid data (kept unrounded between stages: `k_s = round(k_1 sqrt(2)^s)`, at least 1).
# The reason: the drift between averages costs about `eta^2 k` (iid) or `eta^2 k^2`
# (non-iid); when eta halves, doubling k (or multiplying it by sqrt(2)) keeps the drift
# proportional to eta. Read `STLSGD.step`:

# %%
say(inspect.getsource(STLSGD.step))

# %% [markdown]
# ## 6. Exercise 11.2: STL-SGD's schedule
#
# Write `stl_stages(t1, k1, n_stages, data)`: a list of `n_stages` tuples
# `(length, period, lr_factor)`, one per stage s = 0, 1, ...: `length = t1 2^s`,
# `lr_factor = 0.5^s`, and `period` as described above (`data` is `"iid"` or `"non-iid"`;
# Python's `round`, and never below 1).

# %%
def stl_stages(t1, k1, n_stages, data="iid"):
    """[(stage length in steps, communication period, lr factor), ...] for STL-SGD."""
    raise NotImplementedError  # your code here


# %%
stl_stages = exercise("11.2", stl_stages)
for data in ("iid", "non-iid"):
    say(f"{data:8s}: " + ", ".join(f"(T={T}, k={k}, lr x{f:g})" for T, k, f in stl_stages(200, 2, 5, data)))

# %% [markdown]
# With `t1 = 200, k1 = 2` and iid data, five stages cover 6200 steps with 200/2 + 400/4 +
# ... = 500 averages: the same number in every stage, 100, while the stages double in
# length. Run it on the ConvNet with e.g.
# `mpiexec -n 2 python -m minips train --algo stl-sgd:t1=200:k1=2 --schedule constant --epochs 3`
# (`--schedule constant`: STL-SGD halves the learning rate itself).
#
# **Where next**: step 12 replaces the allreduce by messages to a few neighbours (gossip),
# and step 13 compresses what is sent. `python -m minips algorithms` lists every method
# with its options.
