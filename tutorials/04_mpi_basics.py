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
# # Step 4: MPI basics with mpi4py
#
# **What you will learn**
#
# - the SPMD model: `mpiexec -n 2` starts this same file twice; each copy (a **rank**) knows
#   its number and the number of ranks, and they cooperate through **collectives**;
# - **Allreduce**: every rank contributes an array and every rank gets the sum; its cost
#   for small and large messages;
# - **Iallreduce**, the nonblocking version: it returns a **request** at once; you compute,
#   then `wait`. And the surprise: the reduction may not advance while you compute, unless
#   something drives MPI's **progress** engine;
# - how minips wraps all this in one class, `Comm` (`minips/distributed/comm/core.py`; its MPI
#   back-end `comm/mpi.py` is the only file of minips that imports mpi4py).
#
# **Runs with**: `mpiexec -n 2 python tutorials/04_mpi_basics.py`, a few seconds.
# (Opened as a notebook it runs on one rank, where every collective is trivial; its last
# cell, `run_on_ranks(2)`, runs the notebook as you last saved it on 2 ranks.)
# **Files to read alongside**: `minips/distributed/comm/core.py` (`Comm`),
# `minips/distributed/comm/collectives.py` (`allreduce`, `iallreduce`),
# `minips/distributed/comm/request.py` (`Request`) and `minips/distributed/comm/__init__.py`
# (`get_comm`).

# %%
import time

import matplotlib.pyplot as plt
import numpy as np

from _common import exercise, mpi_setup, out_dir, pick, require_ranks, run_on_ranks, say, show
from minips.distributed.comm import get_comm

comm = mpi_setup()
require_ranks(comm, 2, "04_mpi_basics.py")
OUT = out_dir("04")

# %% [markdown]
# ## 1. Ranks: one program, several processes
#
# Every rank runs every line of this file. `comm.rank` (0 .. size-1) is what makes them
# differ. All ranks print here; the lines may come out in any order.

# %%
print(f"hello from rank {comm.rank} of {comm.size}", flush=True)
comm.barrier()
say(comm.describe())

# %% [markdown]
# `say(...)` (from the tutorials' `_common.py`) prints on rank 0 only; we use it from now on.
#
# Under the hood, `Comm` holds an mpi4py communicator, `comm.mpi` (`MPI.COMM_WORLD`). mpi4py
# has two families of methods: lower-case ones (`bcast`, `allgather`, ...) send any
# picklable Python object, convenient for small things; Capitalised ones (`Bcast`,
# `Allreduce`, ...) send NumPy buffers directly, with no copy: that is what gradients use.
# Started without `mpiexec`, `Comm` is a one-rank communicator with the same interface,
# so all of minips also runs as a plain script.

# %%
everyone = comm.allgather({"rank": comm.rank, "pid": __import__("os").getpid()})
say("allgather of small Python objects:", everyone)

# %% [markdown]
# ## 2. Allreduce: everyone gets the sum
#
# Each rank starts with its own array; after `Allreduce` every rank holds the elementwise
# **sum** over ranks, in place (`MPI_IN_PLACE`: the input buffer is overwritten). In data
# parallel training the arrays are gradients and dividing by the number of ranks gives
# their average (step 5). First with mpi4py directly, then with `Comm.allreduce`, which
# also checks the buffer (contiguous float32) and returns the seconds it took.

# %%
from mpi4py import MPI  # noqa: E402  (only minips/distributed/comm/mpi.py does this inside minips)

buf = np.full(4, comm.rank + 1, dtype=np.float32)
print(f"rank {comm.rank} before: {buf}", flush=True)
if comm.mpi is not None:
    comm.mpi.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
print(f"rank {comm.rank} after Allreduce: {buf}", flush=True)
comm.barrier()

buf = np.full(4, comm.rank + 1, dtype=np.float32)
seconds = comm.allreduce(buf)
say(f"Comm.allreduce: {buf} in {seconds * 1e6:.0f} us; expected {sum(r + 1 for r in range(comm.size))}")

# %% [markdown]
# ### What does an allreduce cost?
#
# A message of n bytes costs about `alpha + n * beta`: a fixed **latency** `alpha` and a
# per-byte cost `beta` (1 / bandwidth). Small messages are all latency; large ones all
# bandwidth. We time allreduces from 1 KB to 16 MB (the ConvNet's gradient is 1.6 MB).
# Here the "network" is the shared memory of one machine, much faster than a cluster's
# (step 5 emulates a real one); step 10 fits the model to such measurements.

# %%
sizes = [2**k for k in range(10, pick(25, 21), 2)]
times = []
for n in sizes:
    b = np.ones(n // 4, np.float32)
    comm.allreduce(b)  # warm-up
    reps = 20 if n < 2**20 else 5
    comm.barrier()
    t0 = time.perf_counter()
    for _ in range(reps):
        comm.allreduce(b)
    times.append(comm.allreduce_scalar((time.perf_counter() - t0) / reps, "max"))
for n, t in zip(sizes, times):
    say(f"{n / 1024:9.0f} KB  {t * 1e6:9.0f} us  {n / t / 1e9:6.2f} GB/s")

if comm.rank == 0:
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.loglog(sizes, [t * 1e6 for t in times], "o-")
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("allreduce time (us)")
    ax.set_title(f"Allreduce on {comm.size} rank(s):\nlatency-bound, then bandwidth-bound")
    ax.grid(alpha=0.3, which="both")
    show(fig, OUT / "allreduce_time.png")


# %% [markdown]
# ## Exercise 4.1: the average over ranks
#
# Write `allreduce_mean(comm, x)`: return the elementwise **mean** over all ranks of each
# rank's float32 array `x`, as a new float32 array (leave `x` unchanged: `comm.allreduce`
# works in place, so give it a copy). `comm.size` is the number of ranks. Any of the calls
# of this step will do (`comm.allreduce`, `comm.iallreduce` and its `wait`, mpi4py's
# `comm.mpi.Allreduce`). The check runs it on the ranks of this job and on jobs of 3 and 5
# ranks simulated in one process, each simulated rank running your function.

# %%
def allreduce_mean(comm, x):
    # YOUR CODE HERE
    raise NotImplementedError


# %%
allreduce_mean = exercise("4.1", allreduce_mean, comm=comm)

# %% [markdown]
# ## 3. Iallreduce: start now, finish later
#
# `comm.iallreduce(buf)` starts the allreduce and returns a `Request` at once. The buffer
# belongs to MPI until the request completes: minips makes it **read-only** meanwhile, so
# code that writes it by mistake fails loudly instead of silently corrupting the sum.
# `req.test()` asks "done yet?" (and lets MPI work a little); `req.wait()` blocks until done.
# Each request records `post_time` and `complete_time` (`time.perf_counter()` seconds).

# %%
buf = np.full(1_000_000, comm.rank + 1.0, dtype=np.float32)
req = comm.iallreduce(buf)
try:
    buf[0] = 42.0
except ValueError as e:
    say("writing the buffer in flight:", e)
say("done right after posting?", req.test())
blocked = req.wait()
say(f"after wait: buf[:3] = {buf[:3]}, blocked {blocked * 1e3:.2f} ms, "
    f"posted->complete {1e3 * (req.complete_time - req.post_time):.2f} ms")

# %% [markdown]
# ## 4. Progress: does it advance while we compute?
#
# The promise of a nonblocking allreduce is **overlap**: compute while the network works.
# But in MPICH (and most MPI libraries) a collective advances only *inside MPI calls*,
# unless an asynchronous progress thread is enabled. So minips offers three progress modes
# (`Comm(progress=...)`, `--progress` on the command line):
#
# - `none`: no MPI call between posting and waiting;
# - `poll`: call `comm.progress()` (an `MPI_Test` on every pending request) often: the
#   Trainer does it after every layer's forward and every node's backward;
# - `thread`: a background thread sits in `MPI_Wait` for each request.
#
# The experiment: post a 16 MB Iallreduce, compute (matrix products, in chunks) for about
# 1.5x as long as the allreduce takes alone, then wait. The figure shows, for each mode,
# the compute chunks and the allreduce from post to completion as seen by rank 0.

# %%
rng = np.random.default_rng(comm.rank)
A = rng.standard_normal((192, 192)).astype(np.float32)
nbytes = pick(16, 4) * 2**20
big = np.ones(nbytes // 4, np.float32)

t_alone = []
for _ in range(3):
    comm.barrier()
    t_alone.append(comm.allreduce(big))
t_alone = comm.allreduce_scalar(float(np.median(t_alone)), "max")
t0 = time.perf_counter()
for _ in range(20):
    A @ A
per_chunk = (time.perf_counter() - t0) / 20
chunks = int(comm.allreduce_scalar(max(8, int(1.5 * t_alone / per_chunk) // 4), "max"))
say(f"allreduce of {nbytes >> 20} MB alone: {t_alone * 1e3:.1f} ms; compute: {chunks} chunks of 4 matrix products")


def overlap_run(mode):
    c = get_comm(None, mode)          # reconfigure the world Comm's progress mode
    c.barrier()
    t0 = time.perf_counter()
    req = c.iallreduce(big)
    spans = []
    for _ in range(chunks):
        s = time.perf_counter()
        for _ in range(4):
            A @ A
        spans.append((s - t0, time.perf_counter() - t0))
        if mode == "poll":
            c.progress()
        elif mode == "thread":
            req.test()  # only reads the flag the helper thread sets: no MPI call
    w0 = time.perf_counter() - t0
    req.wait()
    return {"mode": mode, "spans": spans, "post": req.post_time - t0, "complete": req.complete_time - t0,
            "wait": (w0, time.perf_counter() - t0)}


runs = [overlap_run(m) for m in ("none", "poll", "thread")]
get_comm(None, "poll")  # back to the default
for r in runs:
    say(f"{r['mode']:>6}: compute ends at {1e3 * r['spans'][-1][1]:6.1f} ms, allreduce completes at "
        f"{1e3 * r['complete']:6.1f} ms, waited {1e3 * (r['wait'][1] - r['wait'][0]):6.1f} ms after compute")

if comm.rank == 0:
    fig, ax = plt.subplots(figsize=(8, 3.6))
    for i, r in enumerate(runs):
        y = 3 * (len(runs) - 1 - i)
        ax.broken_barh([(s * 1e3, (e - s) * 1e3) for s, e in r["spans"]], (y + 1, 0.8), color="#4C72B0")
        ax.broken_barh([(r["post"] * 1e3, (r["complete"] - r["post"]) * 1e3)], (y, 0.8), color="#C44E52")
        ax.broken_barh([(r["wait"][0] * 1e3, (r["wait"][1] - r["wait"][0]) * 1e3)], (y + 1, 0.8),
                       color="#DDDDDD", hatch="///")
    from matplotlib.patches import Patch
    ax.legend(handles=[Patch(color="#4C72B0", label="compute"), Patch(color="#C44E52", label="allreduce in flight"),
                       Patch(facecolor="#DDDDDD", hatch="///", label="blocked in wait")],
              loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)  # beside the bars, not over them
    ax.set_yticks([3 * (len(runs) - 1 - i) + 0.9 for i in range(len(runs))], [r["mode"] for r in runs])
    ax.tick_params(axis="y", length=0)
    ax.set_xlabel("milliseconds since the Iallreduce was posted (rank 0)")
    ax.set_title(f"one {nbytes >> 20} MB Iallreduce during compute, per progress mode")
    ax.set_xlim(left=0)
    show(fig, OUT / "progress_timeline.png")

# %% [markdown]
# How to read it (your numbers will differ; they depend on the machine and its load):
#
# - `none`: the allreduce makes (almost) no progress during compute; it happens inside
#   `wait`, after the compute. No overlap.
# - `poll`: each `comm.progress()` between chunks lets MPICH move the next piece, so the
#   allreduce finishes during the compute and the wait is near zero. The reduction's copies
#   and additions still run on *this* core, between the chunks.
# - `thread`: a helper thread drives it; it also finishes early, but on a machine with no
#   spare core the helper thread competes with the compute for the CPU. (In this mode
#   `req.test()` only reads a flag that the helper thread sets, so the loop above calls it
#   after each chunk to record when the request completed; it does not drive MPI.)
#
# `complete_time` is when *this rank noticed* completion (in `test` or `wait`), so it is
# only as precise as the chunks between checks.
#
# This is why minips' default is `poll`, and why `docs/distributed.md` discusses
# `MPIR_CVAR_ASYNC_PROGRESS=1` (MPICH's own progress thread). The full measurement, with
# overlap efficiency per mode, is `mpiexec -n 2 python -m minips bench comm`.


# %% [markdown]
# ## Exercise 4.2: overlap an allreduce with work
#
# Write `overlapped(comm, buf, chunks)`: start an Iallreduce of `buf`, then call each
# function in the list `chunks` (each is some compute: `chunk()`), calling `comm.progress()`
# after each one; then wait for the request and return it. The check verifies that the
# allreduce was posted *before* the work started, that progress was driven during the work,
# that your function completed the request itself (`req.wait()`, or `req.test()` until it
# says True: `comm.progress()` lets it advance but does not promise that it is done), and
# that `buf` held the sum when your function returned.

# %%
def overlapped(comm, buf, chunks):
    # YOUR CODE HERE
    raise NotImplementedError


# %%
overlapped = exercise("4.2", overlapped, comm=comm)

# %% [markdown]
# ## 5. A slower network, emulated
#
# Two ranks on one machine talk through shared memory, far faster than a cluster's network.
# To see what the algorithms of steps 5-8 are for, minips can **emulate** an interconnect:
# with `get_comm(network="1gbe")` (or `--network 1gbe`) every allreduce takes at least the
# time a ring allreduce would take on 1 Gb/s Ethernet,
# `2 (P-1) alpha + 2 (P-1)/P n beta` (`minips/distributed/costmodel.py`), and the waiting rank
# *sleeps* for the difference, as it would with a network card that moves the data.
# Everything measured that way is labelled EMULATED.

# %%
from minips.distributed.costmodel import NETWORKS  # noqa: E402

c = get_comm(network="1gbe")
b = np.ones(2**20 // 4, np.float32)
measured = c.allreduce(b)
model = NETWORKS["1gbe"].allreduce_time(b.nbytes, c.size)
say(f"{c.network}: 1 MB allreduce took {measured * 1e3:.2f} ms; the model says {model * 1e3:.2f} ms")
get_comm(network=None)  # back to the real (shared-memory) network

# %% [markdown]
# ## What you saw
#
# - `mpiexec -n P` runs P copies; `rank` and collectives make them cooperate.
# - Allreduce sums arrays across ranks in place; its time is latency plus size/bandwidth.
# - Iallreduce returns a request; the buffer is off-limits until it completes; whether it
#   advances during compute depends on progress (`none` / `poll` / `thread`).
#
# **Next**: step 5 uses one Allreduce per step to train on several ranks, and shows that it
# is exactly SGD with a larger batch.


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
