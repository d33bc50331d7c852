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
# # Step 6: Overlapping communication with the backward pass (buckets)
#
# **What you will learn**
#
# - how minips lays all gradients out in one flat buffer, in the order the backward pass
#   produces them, and cuts it into **buckets**;
# - **gradient hooks**: autograd tells you the moment a parameter's gradient is complete;
# - `overlap-sync` (`OverlapSyncSGD`, as in Horovod and PyTorch DDP): post each bucket's
#   Iallreduce from a hook as soon as it is full, so communication runs *during* the rest
#   of backward. Same maths as `sync`, less waiting;
# - why it can help the ConvNet but not the MLP: it depends on *when* the big gradients are
#   ready, which depends on the model and on the order in which backward visits the graph.
#
# **Runs with**: `mpiexec -n 2 python tutorials/06_overlap_buckets.py`, about 11 s on idle cores.
# (Opened as a notebook it runs on one process; its last cell runs it on 2 ranks.)
# **Files to read alongside**: `minips/distributed/flat.py` (FlatParams, buckets),
# `minips/autograd.py::backward` (where leaf hooks fire), `minips/tensor.py::register_grad_hook`,
# `minips/distributed/algorithms/sync.py::OverlapSyncSGD`.

# %%
import inspect
import time

import matplotlib.pyplot as plt
import numpy as np

import minips as mp
from _common import exercise, mpi_setup, out_dir, pick, require_ranks, run_on_ranks, say, show
from minips.data import BatchLoader, DistributedSampler, load_image_dataset
from minips.distributed.algorithms import make_algorithm
from minips.distributed.algorithms.sync import OverlapSyncSGD
from minips.distributed.comm import get_comm
from minips.distributed.flat import FlatParams
from minips.models import MLP, ConvNet
from minips.optim import SGD
from minips.train import Trainer, TrainConfig

comm = mpi_setup()
require_ranks(comm, 2, "06_overlap_buckets.py")
OUT = out_dir("06")
P = comm.size

# %% [markdown]
# ## 1. The flat buffer and its buckets
#
# `FlatParams` puts all parameters in one float32 buffer, in **reverse** registration
# order: the backward pass computes the last layer's gradients first, so they sit at the
# start. A **bucket** is a run of whole parameters from the start on: a bucket closes as
# soon as it holds at least `bucket_mb` MiB (a parameter is never split; `0` means one
# bucket for everything). Here is the ConvNet's buffer with 0.05 MiB buckets:

# %%
mp.random.seed(0)
convnet = ConvNet()
names = [n for n, _ in convnet.named_parameters()]
flat = FlatParams(convnet.parameters(), num_grad_buffers=1, bucket_mb=0.05)
say(f"{'parameter':22s}{'offset':>10s}{'size':>10s}  bucket")
for i in sorted(range(len(names)), key=lambda i: flat.offsets[i]):
    say(f"{names[i]:22s}{flat.offsets[i]:10d}{convnet.parameters()[i].size:10d}  {flat.bucket_of_param[i]}")
say("p.data is a view into flat.weights:", np.shares_memory(convnet.parameters()[0].data, flat.weights))

if comm.rank == 0:
    fig, ax = plt.subplots(figsize=(9, 1.8))
    colors = plt.cm.tab10.colors
    for i in range(len(names)):
        p = convnet.parameters()[i]
        ax.barh(0, p.size, left=flat.offsets[i], color=colors[flat.bucket_of_param[i]], edgecolor="k", lw=0.3)
        if p.size > 20_000:
            ax.text(flat.offsets[i] + p.size / 2, 0, names[i], ha="center", va="center", fontsize=8)
    ax.set_yticks([])
    ax.set_xlabel("position in the flat gradient buffer (float32 elements); colour = bucket")
    ax.set_title("ConvNet gradients in backward order: the big Linear layer comes early")
    show(fig, OUT / "flat_buffer.png")

# %% [markdown]
# ## 2. When is each gradient ready? Gradient hooks
#
# A leaf's gradient is complete when every node that uses it has run its backward.
# `minips.autograd.backward` counts those uses in advance and calls the leaf's hooks
# (`Tensor.register_grad_hook(fn)`) the moment the count reaches zero. We hang a hook on
# every ConvNet parameter that notes the time, and run one forward + backward:

# %%
ds = load_image_dataset("fashion-mnist-mini")
batch = (ds.train_x[:32], ds.train_y[:32])
ready = {}
handles = [p.register_grad_hook(lambda t, n=n: ready.setdefault(n, time.perf_counter()))
           for n, p in convnet.named_parameters()]
for _ in range(2):  # the first pass also loads the compiled kernels
    ready.clear()
    loss = convnet.loss(batch)
    t0 = time.perf_counter()
    loss.backward()
    t_end = time.perf_counter() - t0
for h in handles:
    h.remove()
for n, t in sorted(ready.items(), key=lambda kv: kv[1]):
    say(f"{1e3 * (t - t0):7.2f} ms  {n}")
say(f"{1e3 * t_end:7.2f} ms  backward done")

# %% [markdown]
# `classifier.0.weight` holds 95% of the bytes. Its layer is one of the first that backward
# reaches, so its gradient can be ready early, and its bucket can travel while the
# convolutions' backward (most of the arithmetic) runs. Whether it *is* ready early depends
# on the order in which `backward` visits the graph. `Linear` computes `x @ W.T`, so `W`
# reaches the product through a `Transpose` node. Any topological order is *correct*, but
# a depth-first one may visit that little node only after everything that produced `x`,
# i.e. at the very end. minips sorts the nodes by creation time, newest first
# (`minips/autograd.py::_topological_order`): that is a valid order, because a node is
# always created after its inputs, and it visits the `Transpose` right after the product,
# as the forward pass created them. (An earlier minips used the depth-first order, and
# overlap-sync hid almost nothing on the ConvNet; `tests/test_autograd.py::
# test_leaf_gradients_complete_in_reverse_layer_order` keeps it from coming back.)

# %%
big = "classifier.0.weight"
frac_big = (ready[big] - t0) / t_end
say(f"{big} is ready after {frac_big:.0%} of the backward pass: its bucket can be averaged while the "
    "convolutions' backward runs.")

# %% [markdown]
# ## 3. OverlapSyncSGD: post each bucket from a hook
#
# `OverlapSyncSGD` registers one hook per parameter; when the last parameter of a bucket is
# ready, it posts that bucket's Iallreduce. `step()` then posts any bucket that got no
# gradient, waits for all of them, and applies the same update as `sync`. Meanwhile, the
# default `poll` progress mode calls `comm.progress()` after every node's backward
# (`minips.autograd.backward_callbacks`), so the posted buckets advance.

# %%
say(inspect.getsource(OverlapSyncSGD._param_ready))
say(inspect.getsource(OverlapSyncSGD._post))

# %% [markdown]
# ### A timeline of one step
#
# We run a few training steps of the ConvNet with `sync` and with `overlap-sync` on an
# **emulated 1 Gb/s Ethernet** (step 4, section 5), and draw the last step as seen by rank 0:
# forward, backward, the time blocked in `step()`, and for `overlap-sync` each bucket's
# Iallreduce from post to completion (`Request.post_time`, `complete_time`; the last step's
# requests stay in `algo.requests`, bucket index -> Request). For `sync` the blocking allreduce
# is inside `step()`.

# %%
MODELS = {"convnet": ConvNet, "mlp": lambda: MLP(784, (256,), 10)}


def instrumented_steps(algo_name, model_name, network, steps=4, bucket_mb=0.25):
    get_comm(network=network)              # emulate the interconnect
    mp.random.seed(0)
    model = MODELS[model_name]()
    opt = SGD(model.parameters(), lr=0.05, momentum=0.9)
    opts = {"bucket_mb": bucket_mb} if algo_name == "overlap-sync" else {}
    algo = make_algorithm(algo_name, model.parameters(), opt, comm, **opts)
    loader = BatchLoader(ds.train_x, ds.train_y, 32, DistributedSampler(len(ds.train_x), comm.rank, P, seed=0))
    algo.start()
    for t, b in enumerate(loader):
        if t == steps:
            break
        comm.barrier()
        t0 = time.perf_counter()
        with algo.compute_point():     # the weights to take the gradient at
            loss = model.loss(b)
            t1 = time.perf_counter()
            algo.before_backward()
            loss.backward()
        t2 = time.perf_counter()
        algo.step()
        t3 = time.perf_counter()
    reqs = [(r.post_time - t0, r.complete_time - t0, r.buf.nbytes)
            for r in getattr(algo, "requests", {}).values()]
    algo.finish()
    get_comm(network=None)
    return {"label": f"{algo_name}, {model_name}", "forward": (0, t1 - t0), "backward": (t1 - t0, t2 - t0),
            "step": (t2 - t0, t3 - t0), "requests": reqs, "total": t3 - t0}


timelines = [instrumented_steps(a, m, "1gbe", steps=pick(4, 2))
             for m in ("convnet", "mlp") for a in ("sync", "overlap-sync")]
for tl in timelines:
    say(f"{tl['label']:24s} step {1e3 * tl['total']:6.1f} ms, blocked in step() {1e3 * (tl['step'][1] - tl['step'][0]):6.1f} ms")
    for s, e, nb in tl["requests"]:
        b0, b1 = tl["backward"]
        hidden = max(0.0, min(e, b1) - s) / (e - s) if e > s else 1.0
        say(f"    bucket of {nb / 2**20:.2f} MB posted at {1e3 * (s - b0):5.1f} ms of a {1e3 * (b1 - b0):5.1f} ms "
            f"backward; {hidden:.0%} of its flight under the backward pass")

if comm.rank == 0:
    fig, ax = plt.subplots(figsize=(9, 4.2))
    colors = {"forward": "#4C72B0", "backward": "#55A868", "step": "#DDDDDD"}
    for i, tl in enumerate(timelines):
        y = 3 * (len(timelines) - 1 - i)
        for k in ("forward", "backward", "step"):
            s, e = tl[k]
            ax.broken_barh([(1e3 * s, 1e3 * (e - s))], (y + 1.1, 0.8), facecolor=colors[k],
                           edgecolor="#888888" if k == "step" else colors[k], hatch="///" if k == "step" else None,
                           label=("blocked in step()" if k == "step" else k) if i == 0 else None)
        for j, (s, e, nb) in enumerate(tl["requests"]):
            ax.broken_barh([(1e3 * s, 1e3 * (e - s))], (y + 0.1 + 0.45 * (j % 2), 0.4), color="#C44E52",
                           label="bucket Iallreduce" if i == 1 and j == 0 else None)
            ax.text(1e3 * e, y + 0.3 + 0.45 * (j % 2), f" {nb / 2**20:.2f} MB", fontsize=7, va="center")
    # each row named on the y axis, so the time axis starts at 0 ms
    ax.set_yticks([3 * (len(timelines) - 1 - i) + 1 for i in range(len(timelines))],
                  [tl["label"] for tl in timelines], fontsize=9)
    ax.tick_params(axis="y", length=0)
    ax.set_xlim(0, 1.15 * 1e3 * max(max([tl["total"], *(e for _, e, _ in tl["requests"])]) for tl in timelines))
    ax.set_xlabel("milliseconds from the start of the step (rank 0)")
    ax.set_title(f"one training step, EMULATED 1 GbE, {P} ranks")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)  # beside the bars, not over them
    show(fig, OUT / "overlap_timeline.png")

# %% [markdown]
# How to read it:
#
# - **sync**: after backward, `step()` blocks for the whole allreduce.
# - **overlap-sync**: each red bar starts when its bucket's last gradient is ready. The
#   part of it that lies under the (green) backward pass is hidden; what sticks out past the
#   end of backward is waited for in `step()` (hatched). For the ConvNet, the 1.6 MB
#   classifier bucket is posted when `classifier.0.weight`'s gradient is ready (section 2):
#   the earlier, the more it hides.
# - **MLP**: its big layer is the *first* one, so its gradient is necessarily the last to be
#   ready: overlap cannot hide it, whatever the visit order.
#
# The lesson of section 2 (overlap works when the order of the backward pass lets it)
# is the one that made PyTorch DDP record the order in which gradients actually become
# ready and build its buckets in that order.
#
# On the emulation: a request's modelled wire time starts when the link is free, so two
# buckets in flight at once queue one behind the other, as on a real link
# (`minips/distributed/comm/meter.py`, `_link_until`).
#
# ### The Trainer's view: overlap efficiency
#
# The Trainer measures a blocking allreduce of the whole gradient before training
# (`comm_alone_s`) and reports **overlap efficiency** = 1 - wait / comm_alone: 0 when every
# byte is waited for, 1 when all communication is hidden. We compare `sync` and
# `overlap-sync` with several bucket sizes on the ConvNet, emulated 1 GbE:

# %%
rows = []
for algo_name, bucket in (("sync", None), ("overlap-sync", 0.0), ("overlap-sync", 0.05), ("overlap-sync", 0.25)):
    label = algo_name if bucket is None else f"{algo_name}, buckets {bucket:g} MiB" if bucket else \
        f"{algo_name}, one bucket"
    cfg = TrainConfig(model="convnet", algo=algo_name, bucket_mb=1.0 if bucket is None else bucket, epochs=1,
                      max_steps=pick(30, 6), batch_size=32, network="1gbe", quiet=True, label=label,
                      out=str(OUT / label.replace(", ", "-").replace(" ", "")), overwrite=True)
    s = Trainer(cfg).run()
    rows.append(s)
    eff = s["overlap_efficiency"]
    say(f"{label:32s} step {1e3 * s['step_time_s']:6.1f} ms, wait {1e3 * s['time_breakdown']['wait']:5.1f} ms, "
        f"overlap efficiency {'n/a (one rank)' if eff is None else f'{eff:.2f}'}")

if comm.rank == 0 and rows[0]["overlap_efficiency"] is not None:
    fig, ax = plt.subplots(figsize=(8, 3.6))
    y = np.arange(len(rows))[::-1]  # one row per run, first on top; horizontal: the labels have room
    ax.barh(y, [1e3 * s["step_time_s"] for s in rows], color="#4C72B0", label="step time")
    ax.barh(y, [1e3 * s["time_breakdown"]["wait"] for s in rows], color="#C44E52", label="of which wait")
    for yi, s in zip(y, rows):
        ax.text(1e3 * s["step_time_s"], yi, f" eff. {s['overlap_efficiency']:.2f}", va="center", fontsize=8)
    ax.set_yticks(y, [s["label"] for s in rows])
    ax.set_xlim(0, 1.2e3 * max(s["step_time_s"] for s in rows))  # room for the efficiency labels
    ax.set_xlabel("ms per step (mean)")
    ax.set_title("ConvNet, 2 ranks, EMULATED 1 GbE")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the bars, not over them
    show(fig, OUT / "overlap_efficiency.png")

# %% [markdown]
# With one bucket, overlap-sync posts everything at the end of backward: no better than
# sync. Smaller buckets can start earlier, but each pays the latency again (`2 (P-1) alpha`
# per allreduce), and a bucket can only start when its *last* gradient is ready: for the
# ConvNet, the classifier bucket starts when `classifier.0.weight` is ready (section 2), so
# the gain is bounded by how much backward remains after that. PyTorch DDP defaults to
# 25 MB buckets for models a hundred times larger, and builds its buckets in the order
# gradients were *observed* to be ready in the first iteration, for exactly this reason.
#
# Overlap-sync still *waits* at the end of every step for the last bucket, and it can hide
# at most the backward pass's duration. When communication takes longer than a whole step,
# no reordering within the step helps: that is what pseudo-synchronous SGD (step 7) changes.


# %% [markdown]
# ## Exercise 6.1: plan the buckets
#
# Write `bucket_plan(sizes, bucket_mb)`: `sizes` are the parameters' element counts in
# registration order (float32, 4 bytes each). Return the buckets as lists of parameter
# indices, in backward (reverse) order, following `FlatParams`' rule: add parameters to the
# current bucket until it holds at least `bucket_mb` MiB (`bucket_mb * 2**20` bytes), then
# close it; the last bucket takes what is left; `bucket_mb = 0` means one bucket.

# %%
def bucket_plan(sizes, bucket_mb):
    # YOUR CODE HERE
    raise NotImplementedError


# %%
bucket_plan = exercise("6.1", bucket_plan)
say("ConvNet, 0.05 MiB:", bucket_plan([p.size for p in ConvNet().parameters()], 0.05))


# %% [markdown]
# ## Exercise 6.2: record the order of gradients
#
# Write `gradient_ready_order(model, batch)`: register a hook on every parameter that
# appends the parameter's name (from `model.named_parameters()`) to a list when its gradient
# is complete, run `model.loss(batch).backward()`, **remove the hooks** (each
# `register_grad_hook` returns a handle with `.remove()`), and return the list.

# %%
def gradient_ready_order(model, batch):
    # YOUR CODE HERE
    raise NotImplementedError


# %%
gradient_ready_order = exercise("6.2", gradient_ready_order)
say("ConvNet gradients in the order they are ready:", gradient_ready_order(ConvNet(), batch))

# %% [markdown]
# Notice that for a convolution the weight comes before the bias, while for `Linear` the
# bias comes first: `Linear` is `x @ W.T + b`, so the addition (bias) is undone first;
# a convolution is one node that returns both gradients at once, in input order (x, w, b).
#
# ## What you saw
#
# - Gradients live in one flat buffer in backward order; buckets are slices of it.
# - Autograd's leaf hooks say when each gradient is final; overlap-sync posts a bucket's
#   Iallreduce right then, and `poll` progress keeps it moving during backward.
# - The gain depends on the model: it hides communication behind the backward of the
#   layers that come *after* a big gradient. The update is still synchronous.
#
# **Next**: step 7 stops waiting altogether: update with the *previous* step's gradient.


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
