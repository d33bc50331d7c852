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
# # Step 5: Synchronous data-parallel SGD, and why it equals large-batch SGD
#
# **What you will learn**
#
# - data parallelism: every rank holds a full copy (a **replica**) of the model and trains
#   on its own share of each batch; one Allreduce per step averages the gradients, so every
#   replica applies the same update and they stay identical;
# - why P ranks with batch b each compute *exactly* one-process SGD with batch P*b (and we
#   check it numerically, to float32 rounding);
# - the driving interface every distributed algorithm of minips shares
#   (`minips/distributed/algorithms/base.py`);
# - what synchronous SGD costs: every step waits for the whole allreduce. On a slow
#   network, with a model whose gradient is large compared to its compute, that wait
#   dominates.
#
# **Runs with**: `mpiexec -n 2 python tutorials/05_sync_sgd.py`, about 12 s on idle cores.
# (Opened as a notebook it runs on one process; its last cell runs it on 2 ranks.)
# **Files to read alongside**: `minips/data/sampler.py` (DistributedSampler),
# `minips/distributed/algorithms/base.py` and `sync.py`, `minips/distributed/flat.py` (first half).

# %%
import inspect

import matplotlib.pyplot as plt
import numpy as np

import minips as mp
from _common import exercise, mpi_setup, out_dir, pick, require_ranks, run_on_ranks, say, show
from minips.data import BatchLoader, DistributedSampler, load_image_dataset
from minips.distributed.algorithms import make_algorithm
from minips.distributed.algorithms.sync import SyncSGD
from minips.models import MLP
from minips.optim import SGD
from minips.train import Trainer, TrainConfig

comm = mpi_setup()
require_ranks(comm, 2, "05_sync_sgd.py")
OUT = out_dir("05")
P = comm.size

# %% [markdown]
# ## 1. Each rank gets its share of every batch
#
# `DistributedSampler` draws one permutation of the training set per epoch, the **same on
# every rank** (it is seeded by `(seed, epoch)`), and rank r takes every P-th sample
# starting at r: `perm[r::P]`. So batch j of size b on rank r holds the samples
# `perm[r::P][j*b:(j+1)*b]`, and the P ranks' batches j together hold exactly
# `perm[j*b*P:(j+1)*b*P]`: batch j of size P*b of a single process.

# %%
ds = load_image_dataset("fashion-mnist-mini")
b = 8
sampler = DistributedSampler(len(ds.train_x), comm.rank, P, seed=0)
mine = sampler.indices()[:b]                       # my batch 0
together = np.sort(np.concatenate(comm.allgather(mine)))
one_process = np.sort(DistributedSampler(len(ds.train_x), 0, 1, seed=0).indices()[:b * P])
say("rank 0's batch 0:           ", mine)
say("all ranks' batches 0:       ", together)
say("one process, batch 0 of P*b:", one_process)
say("the same samples:", np.array_equal(together, one_process))

# %% [markdown]
# ## 2. One synchronous step
#
# The gradient of the mean loss over the P*b samples is the mean of the P ranks' gradients
# (each a mean over b samples: the mean of equal-size means is the mean). So a step is:
# compute the local gradient, **Allreduce** it (sum), divide by P, update. Here is
# `SyncSGD.step` from `minips/distributed/algorithms/sync.py`:

# %%
say(inspect.getsource(SyncSGD.step))

# %% [markdown]
# `self.flat.grads[0]` is the gradient of the *whole model* in one contiguous float32
# buffer: `FlatParams` (`minips/distributed/flat.py`) allocates one buffer for all weights and
# one for all gradients, and makes every `p.data` and `p.grad` a *view* into them. One
# allreduce of one big buffer pays the latency once instead of once per tensor. (Step 6
# looks at its layout.) The optimizer is rebound to that flat buffer too, so
# `optimizer.apply(0, weights, direction)` updates everything at once.
#
# Every algorithm is driven the same way (`minips/distributed/algorithms/base.py`); this is the
# Trainer's loop without the bookkeeping, here with a small MLP (784 -> 64 -> 10) so that
# it takes seconds:

# %%
def train_sync(steps, batch, seed=0, lr=0.05):
    """Train the MLP with SyncSGD for `steps` steps of `batch` samples per rank; returns
    (flat weights, losses)."""
    mp.random.seed(seed)
    model = MLP(784, (64,), 10)
    opt = SGD(model.parameters(), lr=lr, momentum=0.9)
    algo = make_algorithm("sync", model.parameters(), opt, comm)
    loader = BatchLoader(ds.train_x, ds.train_y, batch, DistributedSampler(len(ds.train_x), comm.rank, P, seed=seed))
    algo.start()                      # broadcast rank 0's weights: identical replicas
    losses = []
    for t, batch_ in enumerate(loader):
        if t == steps:
            break
        with algo.compute_point():     # the weights to take the gradient at
            loss = model.loss(batch_)
            algo.before_backward()        # zero the flat gradient buffer
            loss.backward()               # every p.grad (a view into it) is filled
        algo.step()                   # allreduce, average, update
        losses.append(comm.allreduce_scalar(loss.item()) / P)   # the global batch's loss
    algo.finish()
    return algo.flat.weights.copy(), losses


steps = pick(60, 8)
w_sync, losses_sync = train_sync(steps, batch=32)
same = comm.allgather(w_sync.tobytes())
say(f"after {steps} steps the {P} replicas are bit-identical: {all(s == same[0] for s in same)}")

# %% [markdown]
# ## 3. The check: P ranks x batch b == one process x batch P*b
#
# Rank 0 now trains the same small MLP **alone**, with a plain loop (no MPI at all), batch
# P*32 from a one-rank sampler, same seed, same number of steps. If the claim is right,
# the weights agree up to float32 rounding: the sums are the same numbers added in a
# different order. (`tests/test_mpi.py` checks this for P = 2, 3, 4.)

# %%
def train_one_process(steps, batch, seed=0, lr=0.05):
    mp.random.seed(seed)
    model = MLP(784, (64,), 10)
    opt = SGD(model.parameters(), lr=lr, momentum=0.9)
    loader = BatchLoader(ds.train_x, ds.train_y, batch, DistributedSampler(len(ds.train_x), 0, 1, seed=seed))
    losses = []
    for t, batch_ in enumerate(loader):
        if t == steps:
            break
        loss = model.loss(batch_)
        model.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    # the same layout as FlatParams: parameters in reverse order
    return np.concatenate([p.data.ravel() for p in reversed(model.parameters())]), losses


if comm.rank == 0:
    w_one, losses_one = train_one_process(steps, batch=32 * P)
    diff = np.abs(w_one - w_sync).max()
    say(f"max |w_sync - w_one_process| = {diff:.2e} (weights of size ~{np.abs(w_one).mean():.2f})")
    fig, ax = plt.subplots(figsize=(6, 3.8))
    ax.plot(losses_one, "o", ms=5, mfc="none", label=f"1 process, batch {32 * P}")
    ax.plot(losses_sync, "-", label=f"sync SGD, {P} ranks x batch 32")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss of the step's batch")
    ax.set_title("synchronous data-parallel SGD = large-batch SGD")
    ax.legend()
    show(fig, OUT / "sync_equals_big_batch.png")
comm.barrier()

# %% [markdown]
# The consequence is worth pausing on: adding ranks with the same per-rank batch
# (**weak scaling**) is the same as *growing the batch*. Large batches need a larger
# learning rate to make the same progress per sample (the "linear scaling rule":
# `--scale-lr` multiplies lr by P, usually with a warm-up, `--warmup-epochs`; Goyal et al.
# 2017), and very large batches eventually generalise worse. Data parallelism does not
# change the maths of SGD; it changes how fast each step runs.


# %% [markdown]
# ## Exercise 5.1: write the synchronous step
#
# Write `sync_step(comm, grad, weights, optimizer)`: `grad` is this rank's flat gradient
# (float32, the buffer `loss.backward()` filled), `weights` the flat weights.
# Average the gradient over ranks in place (afterwards `grad` holds the mean, as `SyncSGD`
# leaves it) and apply the update with `optimizer.apply(0, weights, direction)`; any of
# step 4's calls will do. The check trains a few steps with your step and
# with `SyncSGD` and compares the weights on every rank, then runs two steps on jobs of 3
# and 4 ranks simulated in one process (each simulated rank running your function).

# %%
def sync_step(comm, grad, weights, optimizer):
    # YOUR CODE HERE
    raise NotImplementedError


# %%
sync_step = exercise("5.1", sync_step, comm=comm)

# %% [markdown]
# ## 4. What does the wait cost?
#
# The Trainer times every phase of every step. In `sync`, the whole blocking allreduce
# counts as **wait**: nothing else happens meanwhile. Between two processes on one machine
# that is short. On a cluster, it is not: we emulate three interconnects (step 4, section 5)
# and train two models for a few dozen steps each:
#
# - the **MLP** (203k parameters, 0.8 MB of gradient) needs little compute per step;
# - the **ConvNet** (422k parameters, 1.6 MB) needs far more compute per step.

# %%
def short_run(model, network, steps):
    label = f"{model}, {network or 'shared memory'}"
    cfg = TrainConfig(model=model, algo="sync", epochs=1, max_steps=steps, batch_size=32, network=network,
                      out=str(OUT / f"{model}-{network or 'real'}"), quiet=True, label=label,
                      overwrite=True)
    s = Trainer(cfg).run()
    b = s["time_breakdown"]
    say(f"{label:28s} step {1e3 * s['step_time_s']:7.1f} ms = compute {1e3 * (b['forward'] + b['backward']):6.1f} ms "
        f"+ wait {1e3 * b['wait']:6.1f} ms + other")
    return s


summaries = []
for model, n in (("mlp", pick(40, 8)), ("convnet", pick(20, 6))):
    for network in (None, "10gbe", "1gbe"):
        summaries.append(short_run(model, network, n))

# %%
if comm.rank == 0:
    from minips.plots import PHASE_COLORS  # the phases' colours in every minips figure
    from minips.timing import PHASES

    fig, ax = plt.subplots(figsize=(9, 3.8))
    y = np.arange(len(summaries))[::-1]  # one bar per run, first on top
    left = np.zeros(len(summaries))
    for ph in PHASES:
        vals = np.array([1e3 * s["time_breakdown"][ph] for s in summaries])
        ax.barh(y, vals, left=left, label=ph, color=PHASE_COLORS[ph])
        left += vals
    ax.set_yticks(y, [s["label"] for s in summaries])
    ax.set_xlabel("ms per step (mean over steps and ranks)")
    ax.set_title(f"sync SGD on {P} ranks: where a step's time goes (1gbe, 10gbe: EMULATED)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the bars, not over them
    show(fig, OUT / "sync_breakdown.png")

# %% [markdown]
# Reading it: on an idle machine, the wait on the real shared-memory "network" is small
# for both models, and on emulated Ethernet the MLP spends most of its step waiting while
# the ConvNet loses a smaller share. (If your wait is large even on shared memory, your
# machine is busy: a rank that is descheduled makes the other wait inside the allreduce;
# see exercise 5.2 below.) With P ranks a ring allreduce moves `2 (P-1)/P` times the gradient per
# rank and pays `2 (P-1)` latencies, so on a real cluster the wait *grows* with P while
# the compute per rank stays the same: that is the scaling problem that steps 6-8 attack
# (step 10 projects it).
#
# ## Exercise 5.2: predict the wait
#
# Write `ring_allreduce_seconds(nbytes, P, alpha, beta)`, the time of a ring allreduce of
# `nbytes` bytes over `P` ranks, for latency `alpha` (s) and `beta` seconds per byte
# (the formula is in section 5 of step 4, and in `minips/distributed/costmodel.py`; with one rank
# there is nothing to do). Then compare its prediction with the wait measured above.

# %%
def ring_allreduce_seconds(nbytes, P, alpha, beta):
    # YOUR CODE HERE
    raise NotImplementedError


# %%
ring_allreduce_seconds = exercise("5.2", ring_allreduce_seconds)
from minips.distributed.costmodel import NETWORKS  # noqa: E402
from minips.models import ConvNet  # noqa: E402

gradient_bytes = {"mlp": 4 * MLP(784, (256,), 10).num_parameters(), "convnet": 4 * ConvNet().num_parameters()}
for s in summaries:
    if s["network_emulated"]:
        net = NETWORKS["1gbe" if "1gbe" in s["label"] else "10gbe"]
        nbytes = gradient_bytes[s["model"]]
        pred = ring_allreduce_seconds(nbytes, P, net.alpha, net.beta)
        say(f"{s['label']:28s} predicted wait {1e3 * pred:6.2f} ms, measured {1e3 * s['time_breakdown']['wait']:6.2f} ms")

# %% [markdown]
# The measured wait is never below the prediction, and often above it, for two reasons:
#
# - the emulator charges *at least* the modelled time: if the real transfer (here through
#   shared memory, with both ranks busy) is slower, you pay that instead;
# - a collective completes only when **every** rank has joined it: if one rank's compute
#   took longer this step (a busy core, a slower batch), the other one waits for it inside
#   the allreduce. Waiting for the slowest rank ("stragglers") is part of the price of
#   synchronous SGD, and it grows with P. On an idle machine this is small; on a shared one
#   it can dominate.
#
# ## What you saw
#
# - Sync SGD = one allreduce of the flat gradient per step, then the same update on every
#   replica; P ranks x batch b is one process x batch P*b.
# - Its step time is compute + the whole allreduce. On a slow network, or with many ranks,
#   the allreduce dominates.
#
# **Next**: step 6 starts the allreduce *during* the backward pass, bucket by bucket.


# %% [markdown]
# ## Run it on 2 ranks (in a notebook)
#
# Opened as a notebook, this step ran above on one process, where every collective is
# trivial (its figures went to the `1-process` subfolder). The next cell runs the notebook
# **as you last saved it**, your answers included, on 2 ranks (`mpiexec -n 2`, through
# `tutorials/_run_notebook.py`), and shows its output and then its figures, which go where
# the script's go. Save the notebook first. As a script (under `mpiexec` or not) the cell
# does nothing.

# %%
run_on_ranks(2)
