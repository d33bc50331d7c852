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
# # Step 7: Pseudo-synchronous SGD: the stale update, and what it costs
#
# **What you will learn**
#
# - the headline method of minips (after Wen et al., *Accelerating Massively Distributed
#   Deep Learning Through Efficient Pseudo-Synchronous Update Method*, IJPP 2024): update
#   with the **previous** step's averaged gradient while the allreduce of the new one runs
#   in the background, so the network never stalls the computation;
# - why it is still "synchronous" in its maths: every replica applies the same update;
# - what staleness costs: on a small problem where everything is visible (least squares),
#   a stale gradient shrinks the range of usable learning rates;
# - what it buys: on a slow network, the wait disappears from the step.
#
# **Runs with**: `mpiexec -n 2 python tutorials/07_pseudo_sync.py`, about 25 s on idle cores.
# (Opened as a notebook it runs on one process; its last cell runs it on 2 ranks.)
# **Files to read alongside**: `minips/distributed/algorithms/pseudo_sync.py`,
# `minips/labs/staleness.py`, `docs/distributed.md` (section "Pseudo-synchronous SGD").

# %%
import inspect
import time

import matplotlib.pyplot as plt
import numpy as np

import minips as mp
from _common import exercise, mpi_setup, out_dir, pick, require_ranks, run_on_ranks, say, show
from minips.data import BatchLoader, DistributedSampler, load_image_dataset
from minips.distributed.algorithms import make_algorithm
from minips.distributed.algorithms.pseudo_sync import PseudoSyncSGD
from minips.distributed.comm import get_comm
from minips.labs.staleness import LeastSquares, run_stale_sgd
from minips.models import ConvNet
from minips.optim import SGD
from minips.train import Trainer, TrainConfig

comm = mpi_setup()
require_ranks(comm, 2, "07_pseudo_sync.py")
OUT = out_dir("07")
P = comm.size

# %% [markdown]
# ## 1. The rule
#
# Notation: P ranks, weights `w_t` (identical on every rank with the predictor used here),
# local gradient `g_t` at `w_t`, its average over ranks `G_t`, staleness `k >= 1` (default 1).
# Step t on every rank:
#
# 1. compute `g_t` at `w_t` (forward + backward);
# 2. **post** `Iallreduce(g_t)`; it will progress while step t+1 computes;
# 3. **complete** the oldest request, from step t-k: `G_{t-k}` (usually done already);
# 4. `d_t = predictor.predict(G_{t-k}, w_t, w_{t-k})`: this step uses the `last`
#    predictor, `d_t = G_{t-k}`, the stale gradient as it is, because it shows the pipeline
#    and nothing else. pseudo-sync's **default** is `local`, `d_t = G_{t-k} + (g_t - g_{t-k})`:
#    the rank's own fresh gradient change added (step 8 builds it and the other predictors);
# 5. `w_{t+1} = optimizer(w_t, d_t)`: momentum acts on `d_t`.
#
# In steps 0..k-1 nothing has arrived yet: those steps post their allreduce and do not
# update (the pipeline fills). Every averaged gradient is applied exactly once, k steps
# after it was computed. With `last` (and every predictor that uses only averaged
# gradients) every rank applies the same `d_t` to the same `w_t`, so the replicas stay
# bit-identical. With the default `local` each rank adds its own gradient change, so the
# ranks' weights drift apart by a small, bounded amount: a run evaluates their average and
# logs the consensus distance (step 8). Here is the code; it reads like the list above:

# %%
say(inspect.getsource(PseudoSyncSGD.step))
say(inspect.getsource(PseudoSyncSGD._post_fresh_gradient))
say(inspect.getsource(PseudoSyncSGD._complete_oldest))

# %% [markdown]
# It keeps k+1 gradient buffers: up to k in flight (read-only until they complete) and one
# that the next backward writes into (`FlatParams.use_grad_buffer` re-points every `p.grad`).
#
# ## 2. The picture: the allreduce crosses into the next step
#
# We run a few steps of the ConvNet on 2 ranks over an **emulated 1 GbE** network (as in
# steps 4-6) with `sync` and with `pseudo-sync` (k = 1, predictor `last`), and draw three
# consecutive steps as rank 0 saw them. To record every request, we hand the algorithm a
# thin wrapper around the communicator that keeps the `Request` objects `iallreduce`
# returns (each has `post_time` and `complete_time`).

# %%
class RecordingComm:
    """Forwards everything to a Comm; keeps every Request that iallreduce returns."""

    def __init__(self, comm):
        self._comm, self.requests = comm, []

    def iallreduce(self, buf, **kw):
        req = self._comm.iallreduce(buf, **kw)
        self.requests.append(req)
        return req

    def __getattr__(self, name):
        return getattr(self._comm, name)


ds = load_image_dataset("fashion-mnist-mini")


def timeline(algo_name, steps=5, show_steps=3, **opts):
    get_comm(network="1gbe")
    mp.random.seed(0)
    model = ConvNet()
    rec = RecordingComm(comm)
    algo = make_algorithm(algo_name, model.parameters(), SGD(model.parameters(), lr=0.05, momentum=0.9), rec,
                          **opts)
    loader = BatchLoader(ds.train_x, ds.train_y, 32, DistributedSampler(len(ds.train_x), comm.rank, P, seed=0))
    algo.start()
    rows, t_origin = [], None
    for t, batch in enumerate(loader):
        if t == steps:
            break
        if t == steps - show_steps:
            comm.barrier()
            t_origin = time.perf_counter()
        t0 = time.perf_counter()
        with algo.compute_point():     # the weights to take the gradient at
            loss = model.loss(batch)
            algo.before_backward()
            loss.backward()
        t1 = time.perf_counter()
        algo.step()
        rows.append((t0, t1, time.perf_counter()))
    algo.finish()
    get_comm(network=None)
    rows = [(a - t_origin, b - t_origin, c - t_origin) for a, b, c in rows[-show_steps:]]
    reqs = [(r.post_time - t_origin, r.complete_time - t_origin) for r in rec.requests
            if r.post_time >= t_origin]
    return {"label": algo_name + ("" if algo_name == "sync" else f" (k={opts['staleness']}, last)"),
            "steps": rows, "requests": reqs}


tls = [timeline("sync", steps=pick(5, 4)),
       timeline("pseudo-sync", steps=pick(5, 4), staleness=1, predictor="last")]
for tl in tls:
    durations = [c - a for a, b, c in tl["steps"]]
    say(f"{tl['label']:26s} step times: " + ", ".join(f"{1e3 * d:.1f} ms" for d in durations))

if comm.rank == 0:
    fig, ax = plt.subplots(figsize=(9, 3.4))
    for i, tl in enumerate(tls):
        y = 3 * (len(tls) - 1 - i)
        for j, (a, b, c) in enumerate(tl["steps"]):
            ax.broken_barh([(1e3 * a, 1e3 * (b - a))], (y + 1.1, 0.8), facecolor="#55A868", edgecolor="white")
            ax.broken_barh([(1e3 * b, 1e3 * (c - b))], (y + 1.1, 0.8), facecolor="#DDDDDD", edgecolor="#888888",
                           hatch="///")
            ax.text(1e3 * (a + b) / 2, y + 1.5, f"step {j}", ha="center", va="center", fontsize=8, color="white")
        if tl["requests"]:
            for j, (s, e) in enumerate(tl["requests"]):
                ax.broken_barh([(1e3 * s, 1e3 * (e - s))], (y + 0.15, 0.7), facecolor="#C44E52")
                ax.text(1e3 * s, y + 0.5, f" g{j}", fontsize=8, va="center", color="white")
        else:
            ax.text(1e3 * tl["steps"][0][1], y + 0.5, " (blocking allreduce inside step(): hatched)", fontsize=8,
                    va="center")
    # each row named on the y axis, so the time axis starts at 0 ms
    ax.set_yticks([3 * (len(tls) - 1 - i) + 1 for i in range(len(tls))], [tl["label"] for tl in tls], fontsize=9)
    ax.tick_params(axis="y", length=0)
    ends = [tl["steps"][-1][2] for tl in tls] + [e for tl in tls for _, e in tl["requests"]]
    ax.set_xlim(0, 1.08 * 1e3 * max(ends))
    ax.set_xlabel("milliseconds (rank 0); green: forward + backward, hatched: in step(),\n"
                  "red: Iallreduce of step j's gradient gj")
    ax.set_title(f"ConvNet, {P} ranks, EMULATED 1 GbE: three consecutive steps")
    show(fig, OUT / "pseudo_sync_timeline.png")

# %% [markdown]
# In `sync`, every step ends with a wait for its own allreduce. In `pseudo-sync`, the
# allreduce of step j is posted at the end of step j's backward and completes during step
# j+1's compute; when step j+1 needs it, it is already there, so `step()` hardly waits.
# (The first gradient applied is step 0's, by step 1: the pipeline fill.)
#
# The price: step j+1 updates with a gradient computed at `w_j`, not at `w_{j+1}`.
#
# ## 3. What staleness costs: a laboratory
#
# On a neural network the effect of a stale gradient is mixed up with everything else. On a
# least-squares problem `f(w) = 1/(2m) ||X w - y||^2` it can be seen in seconds, with the
# same update rule and the same predictors: `minips/labs/staleness.py` runs stale-by-k
# SGD in one process (`simulate_stale_sgd`, and `run_stale_sgd` for a `LeastSquares`
# problem). Ours has d = 200 unknowns, a Hessian with condition number 1,000 and a randomly
# rotated eigenbasis (`rotate=True`, like a real network's dense Hessian), minibatches of
# 32, heavy-ball momentum 0.9. `tests/test_mpi.py` checks that this one-process simulation
# and a real P-rank pseudo-sync run produce the same weights.

# %%
problem = LeastSquares(rotate=True)
lab_steps = pick(1500, 300)
curves = {k: run_stale_sgd(problem, "last", staleness=k, lr=0.05, steps=lab_steps, record_every=5)
          for k in (0, 1, 2, 4)}
for k, r in curves.items():
    say(f"k = {k} ({'sync' if k == 0 else 'stale'}): final loss {r['final_loss']:.4g}"
        + ("  (diverged)" if r["diverged"] else ""))

lrs = np.geomspace(0.005, 0.5, pick(12, 6))
scan = {k: [run_stale_sgd(problem, "last", staleness=k, lr=lr, steps=pick(1000, 200), record_every=50)
            for lr in lrs] for k in (0, 1, 2, 4)}

if comm.rank == 0:
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for k, r in curves.items():
        a.semilogy(np.arange(len(r["loss"])) * 5, r["loss"], label=f"k = {k}" + (" (sync)" if k == 0 else ""))
    a.set_ylim(top=1e4)
    a.set_xlabel("step")
    a.set_ylabel("full-data loss")
    a.set_title("lr = 0.05: staleness slows convergence, then breaks it")
    a.legend()
    for k, runs in scan.items():
        f = [r["final_loss"] if not r["diverged"] else np.nan for r in runs]
        b.loglog(lrs, f, "o-", label=f"k = {k}")
        div = [lr for lr, r in zip(lrs, runs) if r["diverged"] or r["final_loss"] > 1]
        if div:
            b.axvline(div[0], color=b.lines[-1].get_color(), ls=":", lw=1)
    b.set_xlabel("learning rate")
    b.set_ylabel("final loss (missing = diverged)")
    b.set_title("dotted: the first learning rate that fails")
    b.legend()
    show(fig, OUT / "staleness_lab.png")

# %% [markdown]
# Reading it: at a learning rate sync SGD handles comfortably, one step of staleness is
# nearly free; with two, the loss stays high and oscillates; with four, it diverges. The
# scan shows the reason: **the largest usable learning rate shrinks as k grows**. By the time a gradient
# is applied, the weights have already moved k steps (further still with momentum, which
# keeps pushing in the old direction), so the correction overshoots. A stale method must
# either use a smaller learning rate (and converge more slowly) or correct the stale
# gradient: that is the predictor of step 8.


# %% [markdown]
# ## Exercise 7.1: stale-by-k SGD
#
# Write the rule yourself, for the `last` predictor, in one process:
# `stale_sgd(grad_fn, w0, k, lr, momentum, steps)` runs `steps` steps from `w0` (copy it)
# and returns the final weights. At step t: compute `g = grad_fn(w, t)` at the current
# weights and put it in flight; if more than k gradients are in flight, take the oldest and
# update `w` with it through heavy-ball momentum (`v = momentum*v + g`, `v = g` the first
# time; `w = w - lr*v`); otherwise do not update (pipeline fill). The check compares your
# weights with `simulate_stale_sgd` on a small least-squares problem, for k = 1, 2, 3.

# %%
def stale_sgd(grad_fn, w0, k, lr, momentum, steps):
    # YOUR CODE HERE
    raise NotImplementedError


# %%
stale_sgd = exercise("7.1", stale_sgd)

# %% [markdown]
# ## 4. What it buys: real training on 2 ranks
#
# Now the real thing, with the Trainer: the ConvNet for one epoch on 2 ranks (batch 32 per
# rank), emulated 1 GbE, with `sync`, and `pseudo-sync` (predictor `last`) with k = 1 and
# k = 2. The same as
#
# ```
# mpiexec -n 2 python -m minips train --model convnet --network 1gbe --algo pseudo-sync --predictor last --staleness 1 ...
# ```
#
# A run that diverges stops with a `FloatingPointError` naming the step, and the whole
# job ends (an error on any rank aborts every rank, so none is left waiting).

# %%
results = []
for algo_name, k in (("sync", None), ("pseudo-sync", 1), ("pseudo-sync", 2)):
    label = algo_name if k is None else f"pseudo-sync:last:{k}"
    cfg = TrainConfig(model="convnet", algo=algo_name, predictor="last", staleness=k or 1, epochs=1, batch_size=32,
                      max_steps=pick(0, 6), network="1gbe", quiet=True, label=label,
                      out=str(OUT / label.replace(":", "-")), overwrite=True)
    s = Trainer(cfg).run()
    results.append(s)
    b = s["time_breakdown"]
    say(f"{label:22s} test accuracy {s['test_accuracy']:.3f}   step {1e3 * s['step_time_s']:6.1f} ms "
        f"(compute {1e3 * (b['forward'] + b['backward']):6.1f}, wait {1e3 * b['wait']:5.1f})   "
        f"{s['images_per_s']:5.0f} images/s")

# %% [markdown]
# With k = 1 the wait (nearly) vanishes from the step, and the accuracy after an epoch is
# close to sync's. With k = 2 the step is no faster (k = 1 already hid the allreduce here)
# and the accuracy pays clearly for the staleness; try k = 4 (`("pseudo-sync", 4)` in the
# list above): at this learning rate it diverges (`loss is nan at step ...`). So choose the smallest k that hides your
# network, or a predictor that corrects the stale gradient (step 8). The next exercise
# estimates what k = 1 can hide.
#
# If pseudo-sync is *not* faster in your run, compare the forward/backward times of the
# runs before anything else: on a machine where other programs take the cores, compute
# per step varies by more than the 14 ms allreduce, and the comparison then measures the
# other programs (`uptime` shows the load; step 2 shows what a busy core does).
#
# ## Exercise 7.2: predict the step time
#
# With compute time `t_compute` per step and allreduce time `t_comm`, write
# `predicted_step_time(t_compute, t_comm, algo)` for `algo = "sync"` (the allreduce waits
# after compute) and `algo = "pseudo-sync"` with k = 1 (the allreduce of one step runs
# during the next step's compute, so in steady state a step lasts as long as the slower of
# the two). Ignore everything else (the update, the data).

# %%
def predicted_step_time(t_compute, t_comm, algo):
    # YOUR CODE HERE
    raise NotImplementedError


# %%
predicted_step_time = exercise("7.2", predicted_step_time)
sync_s = results[0]
t_c = sync_s["time_breakdown"]["forward"] + sync_s["time_breakdown"]["backward"]
t_m = sync_s["comm_alone_s"] or 0.0
for s in results[:2]:
    say(f"{s['label']:22s} predicted {1e3 * predicted_step_time(t_c, t_m, s['algo']):6.1f} ms, "
        f"measured {1e3 * s['step_time_s']:6.1f} ms")
say(f"best possible speed-up of pseudo-sync over sync for these times: "
    f"{predicted_step_time(t_c, t_m, 'sync') / predicted_step_time(t_c, t_m, 'pseudo-sync'):.2f}x")

# %% [markdown]
# (The measured step also contains the update, the data slicing and, on a busy machine,
# waiting for the slower rank.) The speed-up of overlapping is at most 2x, reached when
# communication takes exactly as long as compute; it matters most when communication
# grows with the number of ranks, as in step 10.
#
# ## What you saw
#
# - Pseudo-sync posts this step's allreduce and applies the one from k steps ago: the
#   network works while the next step computes, and all replicas stay identical.
# - Staleness shrinks the range of stable learning rates; k = 1 is often nearly free,
#   larger k costs accuracy.
# - It removes the wait when communication fits under one step of compute.
#
# **Next**: step 8 forecasts the current gradient from the stale one, so that staleness
# costs less.


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
