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
# # Step 10: A scaling study, the cost model, and running on a Slurm cluster
#
# **What you will learn**
#
# - how to measure your network (allreduce time against message size) and fit the
#   **alpha-beta model** of a ring allreduce to it;
# - **weak scaling**: keep the batch per rank fixed and add ranks; its efficiency, measured
#   at 1 and 2 ranks, and *projected* to a thousand ranks with the cost model, for sync and
#   pseudo-sync SGD on several interconnects;
# - what changes on a cluster: the site's MPI, one rank per core, threads per rank,
#   checkpoints and requeueing (`examples/slurm_pseudo_sync.sh`);
# - how to train on **64 ranks on this laptop** (virtual ranks: threads of one process) to
#   see what an algorithm does at the seed paper's scale.
#
# **Runs in**: one process (it launches `mpiexec -n 2` itself), about 30 s on idle cores.
# **Files to read alongside**: `minips/distributed/costmodel.py`, `minips/bench/comm.py`,
# `examples/slurm_pseudo_sync.sh`, `minips/distributed/comm/virtual/`, `docs/distributed.md`
# ("Running on a Slurm cluster", "Virtual ranks").

# %%
import json

import matplotlib.pyplot as plt
import numpy as np

from _common import ROOT, exercise, minips_cli, mpiexec, out_dir, pick, show, show_png
from minips.distributed.costmodel import NETWORKS
from minips.models import ConvNet

OUT = out_dir("10")

# %% [markdown]
# ## 1. Measure the network: `bench comm`
#
# `python -m minips bench comm` times a blocking `Allreduce` (and `Iallreduce` + `Wait`) for
# message sizes from a few bytes to megabytes, like the OSU micro-benchmarks, and fits the
# ring model of step 5,
#
# `T(n, P) = 2 (P-1) alpha + 2 (P-1)/P * n * beta`,
#
# by least squares (`fit_ring_allreduce`, relative errors so that small and large messages
# count alike). It also reports the **bus bandwidth** `2 (P-1)/P * n / T`, the rate at
# which each rank moves data in a ring (the convention of NCCL's tests). Here, two ranks
# on one machine through shared memory:

# %%
bench_json = OUT / "bench_comm.json"
mpiexec(2, ["-m", "minips", "bench", "comm", "--max-bytes", pick(16, 1) * 2**20, "--no-overlap",
            "--iters", pick(100, 10), "--json", bench_json, "--plot", OUT / "bench_comm.png"])
bench = json.loads(bench_json.read_text())
show_png(OUT / "bench_comm.png")

# %% [markdown]
# Read the fit's quality before trusting it: R^2 near 1 and a small maximum relative error
# mean the two-parameter model describes this network. On a busy machine (other jobs on the
# cores) the small-message times are dominated by processes waiting for the CPU, and the fit
# is poor. On a cluster, run it across two nodes to measure the interconnect.
#
# ## Exercise 10.1: fit alpha and beta yourself
#
# Write `fit_alpha_beta(nbytes, seconds, P)` returning `(alpha, beta)`: the least-squares
# fit of `T = 2(P-1) alpha + 2(P-1)/P n beta` to the measurements, minimising *relative*
# errors (divide each equation, row of the matrix and target alike, by its measured time),
# with negative estimates clipped to 0. `np.linalg.lstsq(A, t, rcond=None)` solves
# `min ||A x - t||`. The check compares with `fit_ring_allreduce`.

# %%
def fit_alpha_beta(nbytes, seconds, P):
    # YOUR CODE HERE
    raise NotImplementedError


# %%
fit_alpha_beta = exercise("10.1", fit_alpha_beta)
rows = bench["allreduce"]
alpha, beta = fit_alpha_beta([r["nbytes"] for r in rows], [r["allreduce_s"] for r in rows], bench["world_size"])
print(f"your fit: alpha = {alpha * 1e6:.2f} us, beta = {beta * 1e9:.4f} ns/B; "
      f"bench comm's: R^2 = {bench['fit']['r2']:.3f}")

# %% [markdown]
# ## 2. Measure: one rank, then two
#
# **Weak scaling** keeps the batch per rank fixed (here 32) and adds ranks: each rank
# always does the same work per step, so ideally the step time stays constant and the
# throughput (images per second) grows P-fold. **Weak-scaling efficiency** is
#
# `E(P) = throughput(P) / (P * throughput(1)) = step time(1) / step time(P)`.
#
# We measure the ConvNet for a few dozen steps on one rank, then on two ranks with `sync`,
# `overlap-sync` and `pseudo-sync` (adaptive predictor), on the real shared-memory network
# and on emulated 1 GbE (`compare` runs them one after the other on the same seed and data).
# The one-rank run uses one thread, since each of the two ranks gets one of the two cores.

# %%
steps = pick(40, 8)
common = ["--model", pick("convnet", "mlp"), "--batch-size", 32, "--epochs", 1, "--max-steps", steps, "--quiet",
          *pick([], ["--no-figures"])]  # fast mode (the tests): compare draws no figures
minips_cli(["compare", "--algos", "sync", "--out", OUT / "p1", "--overwrite", *common], env={"NUMBA_NUM_THREADS": "1",
                                                                             "OPENBLAS_NUM_THREADS": "1"})
networks = pick(("real", "1gbe"), ("1gbe",))
for net in networks:
    mpiexec(2, ["-m", "minips", "compare", "--algos", pick("sync,overlap-sync,pseudo-sync:adaptive",
                                                           "sync,pseudo-sync:adaptive"),
                "--out", OUT / f"p2-{net}", "--overwrite", *common,
                *([] if net == "real" else ["--network", net])], quiet=True)
p1 = json.loads((OUT / "p1" / "compare.json").read_text())[0]
p2 = {net: json.loads((OUT / f"p2-{net}" / "compare.json").read_text()) for net in networks}
t_c = p1["time_breakdown"]["forward"] + p1["time_breakdown"]["backward"]
print(f"1 rank: step {1e3 * p1['step_time_s']:.1f} ms (compute {1e3 * t_c:.1f} ms), {p1['images_per_s']:.0f} images/s")
for net, ss in p2.items():
    for s in ss:
        eff = s["images_per_s"] / (2 * p1["images_per_s"])
        b = s["time_breakdown"]
        print(f"2 ranks, {net:4s} network, {s['label']:22s}: step {1e3 * s['step_time_s']:6.1f} ms, "
              f"wait {1e3 * b['wait']:5.1f} ms, predict {1e3 * b['predict']:5.1f} ms, "
              f"weak-scaling efficiency {eff:.2f}")

# %% [markdown]
# Two ranks on two cores of one machine cannot tell you what happens on 64 nodes: the
# "network" is memory, and the two ranks also compete for the memory bandwidth and caches
# that one rank had to itself (so even a perfect algorithm can fall short of 1.0 here).
# An efficiency *above* 1 means the machine is busy with other work: the operating system
# shares the cores among all running processes, so two ranks get more CPU time than one
# process does.
#
# Look also at the `predict` column: the adaptive predictor's arithmetic (a dozen
# elementwise operations over all 422k parameters per step, plus its diagnostics) is not
# free. When it costs as much as the wait it removes, pseudo-sync gains nothing on this
# network; it pays off when the allreduce is much longer than the predictor (slower
# networks, more ranks, `last` instead of `adaptive`). For larger P we need a model.
#
# ## 3. Project: the cost model
#
# Per step and rank: compute `t_c` (measured above, constant under weak scaling), and one
# allreduce of the whole gradient, `T(n, P)` from the ring model. Ignoring everything else
# (stragglers, contention, the update and the predictor; add their measured times to `t_c`
# for a closer estimate):
#
# - `sync`: `t_c + T(n, P)`;
# - `pseudo-sync`, k = 1: `max(t_c, T(n, P))` (step 7, exercise 7.2).
#
# Note how `T(n, P)` behaves: the bandwidth term tends to `2 n beta` (a ring moves about
# twice the gradient per rank, whatever P), but the latency term `2 (P-1) alpha` grows
# linearly with P. (Real MPI libraries switch to tree or recursive-doubling algorithms for
# large P and small messages; the ring is the pessimistic, bandwidth-optimal case.)
#
# ## Exercise 10.2: weak-scaling efficiency
#
# Write `weak_scaling_efficiency(t_compute, nbytes, P, alpha, beta, algo)` for `algo` in
# `"sync"` and `"pseudo-sync"` (k = 1): the one-rank step time (just `t_compute`: one rank
# does not communicate) divided by the P-rank step time of the model above.
# `minips.distributed.costmodel.ring_allreduce_time(nbytes, P, alpha, beta)` gives `T`.

# %%
def weak_scaling_efficiency(t_compute, nbytes, P, alpha, beta, algo):
    # YOUR CODE HERE
    raise NotImplementedError


# %%
weak_scaling_efficiency = exercise("10.2", weak_scaling_efficiency)

nbytes = 4 * ConvNet().num_parameters()
Ps = np.unique(np.geomspace(1, 1024, 41).astype(int))
fig, ax = plt.subplots(figsize=(8, 4.6))
for (name, net), color in zip([(n, NETWORKS[n]) for n in ("1gbe", "10gbe", "ib-edr")], ("#C44E52", "#DD8452", "#4C72B0")):
    for algo, ls in (("sync", "--"), ("pseudo-sync", "-")):
        ax.semilogx(Ps, [weak_scaling_efficiency(t_c, nbytes, P, net.alpha, net.beta, algo) for P in Ps], ls,
                    color=color, label=f"{algo}, {net.name}")
for s in p2["1gbe"]:
    if s["algo"] in ("sync", "pseudo-sync"):
        ax.plot(2, s["images_per_s"] / (2 * p1["images_per_s"]), "o" if s["algo"] == "sync" else "s",
                color="#C44E52", mfc="none" if s["algo"] == "sync" else "#C44E52", ms=8,
                label=f"measured at P = 2, {s['label']} (EMULATED 1 GbE)")
measured = [s["images_per_s"] / (2 * p1["images_per_s"]) for s in p2["1gbe"]]
ax.set_ylim(0, max(1.05, max(measured) + 0.05))
ax.set_xlabel("ranks P (weak scaling: batch 32 per rank)")
ax.set_ylabel("weak-scaling efficiency")
ax.set_title(f"ConvNet ({nbytes / 2**20:.1f} MB of gradient), t_c = {1e3 * t_c:.0f} ms: cost-model projection")
ax.grid(alpha=0.3, which="both")
ax.legend(fontsize=7, loc="lower left")
show(fig, OUT / "weak_scaling_projection.png")

# %% [markdown]
# Reading it:
#
# - On InfiniBand the gradient of this small model costs little even at 1,000 ranks: both
#   algorithms scale well.
# - On Ethernet, sync loses efficiency as soon as the allreduce is a sizeable fraction of
#   `t_c`, and keeps losing as the latency term grows. Pseudo-sync stays at 1 until the
#   allreduce takes longer than a whole step of compute, then falls as `t_c / T`.
# - So pseudo-sync's advantage is largest where `T` is close to `t_c`, and it buys at most
#   a factor 2 (step 7). The seed paper reports 93.4% weak-scaling efficiency on 64 nodes of
#   Tianhe-II, for much larger models and a faster network: plug your own `t_c`, gradient
#   size and fitted `alpha`, `beta` into this model to see where your cluster stands.
#
# A model is only as good as its assumptions: it ignores stragglers (step 5), contention
# between the ranks of one node for the network card, hierarchical allreduce algorithms,
# and the arithmetic of the reduction itself. Measure on the real cluster, at a few sizes,
# and compare with the projection.

# %% [markdown]
# ## 4. Running on a Slurm cluster
#
# Three things change on a cluster.
#
# **The MPI.** The `mpich` wheel that `pip install -e ".[mpi,test]"` installs is for laptops
# and CI. A cluster's MPI knows its interconnect; build mpi4py against it
# (`docs/distributed.md`, "Running on a Slurm cluster"):
#
# ```
# module load openmpi            # or the site's MPI
# pip install -e ".[test]"       # not the mpi extra
# MPICC=mpicc pip install --no-binary mpi4py mpi4py
# ```
#
# **Ranks and threads.** One rank per core (`--ntasks-per-node` = cores, `--cpu-bind=cores`);
# minips gives each rank `cores on the node // ranks on the node` Numba and BLAS threads
# (1 here), from the shared-memory split communicator and the launcher's variables, so
# nothing is oversubscribed (step 2). The data: build the full Fashion-MNIST once with
# `python -m minips data fashion-mnist ...` and train with `--data fashion-mnist`.
#
# **Time limits.** Jobs end. With `#SBATCH --signal=TERM@120`, Slurm sends SIGTERM two
# minutes before the limit; every rank finishes its step, they agree on a common stopping
# step (a tiny pipelined allreduce of a "stop" flag: `StopAgreement` in `minips/stop.py`),
# write a checkpoint and exit 0. With `--requeue`, the script finds the checkpoint and
# passes `--resume`. Here is the complete example batch script:

# %%
print((ROOT / "examples" / "slurm_pseudo_sync.sh").read_text())

# %% [markdown]
# The checkpoint-and-resume cycle can be tried on the laptop: train 2 ranks for a few steps
# with a checkpoint, then resume from it for a few more. The second run continues the
# *same* trajectory (same weights, optimizer state, pending gradients of pseudo-sync and
# predictor state, random generators): `tests/test_train_cli.py` checks that a run cut and
# resumed ends bit-identical to one that was not.

# %%
ckpt_dir = OUT / "resume"
args = ["-m", "minips", "train", "--model", "mlp", "--epochs", 1, "--out", ckpt_dir, "--quiet",
        "--checkpoint-every", pick(20, 4)]
mpiexec(2, [*args, "--max-steps", pick(20, 4), "--overwrite"], quiet=True)
out = mpiexec(2, [*args, "--max-steps", pick(40, 8), "--resume", ckpt_dir / "checkpoint.h5"], quiet=True)
summary = json.loads((ckpt_dir / "summary.json").read_text())
print(f"resumed run ended at step {summary['steps']} (algorithm {summary['algo']}, predictor {summary['predictor']})")

# %% [markdown]
# On one multi-core node, `bench scaling` runs the whole weak-scaling measurement for you:
# it launches `mpiexec -n P` for each rank count, times the training step of each
# algorithm (forward, backward, wait, predictor), prints E(P) with the breakdown, checks
# the cost model against what it measured (predicted vs measured step), and projects E(P)
# to 1024 nodes on the interconnects you name:
#
# ```
# python -m minips bench scaling --ranks 1,2,4,8,16 --algos sync,overlap-sync,pseudo-sync \
#     --comm-json bench_comm.json --json scaling.json --plot scaling.png --plot-projection projection.png
# ```
#
# `docs/results.md` holds what it measured on the 2-core machine minips was written on,
# and reads the seed paper's 93.4% (64 nodes) against the projection.
#
# Across nodes, a weak-scaling study is the same `compare` command at several job sizes,
# for example (with the batch script above as a template):
#
# ```
# for N in 1 2 4 8 16; do
#   sbatch --nodes=$N --job-name=scale-$N --wrap \
#     "srun --cpu-bind=cores python -m minips compare --data fashion-mnist --model convnet \
#        --algos sync,overlap-sync,pseudo-sync:adaptive --epochs 1 --out runs/scale-$N --quiet"
# done
# ```
#
# then read each `runs/scale-N/compare.json` (`images_per_s` per algorithm) and divide by
# N x ranks per node x the one-rank throughput, as in section 2.
#
# ## 5. Sixty-four ranks on this laptop: virtual ranks
#
# The cost model projects *time* to 64 nodes, but not *accuracy*: does an algorithm still
# learn when the global batch is 64 x 16 samples and each rank sees 1/64 of the data? For
# that the ranks must really run. 64 MPI processes would need about 20 GB here (each loads
# its own NumPy, Numba and copy of the data). **Virtual ranks** run them as 64 threads of
# one process instead: `train --virtual-ranks 64` (or `virtual_ranks=64` below). Each thread
# runs the same Trainer step and the same algorithm file as a rank of `mpiexec -n 64`, with
# the same data partition, initial weights and data order; the data set is loaded once and
# shared. The tests check that a virtual run equals the `mpiexec` run bit for bit at small
# P (`tests/test_virtual_equals_mpi.py`).
#
# What they do not give is cluster *time*: 64 threads take turns on these cores. So the
# summary reports the cost model's **projected** step time on a named network (here
# `--network 10gbe`), computed from the compute each rank measured, and marks measured
# times VIRTUAL.

# %%
from minips.train import train

runs = {}
for algo in ("sync", "pseudo-sync"):
    runs[algo] = train(model="mlp", virtual_ranks=64, algo=algo, batch_size=16, lr=0.05, epochs=pick(3, 1),
                       max_steps=pick(0, 2), network="10gbe", quiet=True, out=str(OUT / f"virtual64-{algo}"),
                       overwrite=True)
for algo, s in runs.items():
    print(f"{algo:12s} {s['world_size']} VIRTUAL ranks, {s['steps']} steps: test accuracy "
          f"{s['test_accuracy']:.3f}, {s['bytes_sent_per_step'] / 2**20:.2f} MiB sent per step and rank, "
          f"projected step {1e3 * s['projected_step_time_s']:.2f} ms on {s['projected_network']} "
          f"(measured here {1e3 * s['step_time_s']:.0f} ms: VIRTUAL, not a cluster's)")

# %% [markdown]
# Both send the same bytes per step (one allreduce of the gradient); the projected step of
# pseudo-sync hides that allreduce behind the next step's compute. Whether it also keeps
# sync's accuracy at 64 ranks takes more epochs and seeds than this cell:
# `python -m minips compare --virtual-ranks 64 ...` and `bench study --virtual-ranks 64` run
# such comparisons for any algorithms. The next section reads one such study.
#
# ## 6. Time to accuracy: predict the winner, then look
#
# Speed per step decides nothing alone. A method that steps faster but learns less per step
# (a compressor drops part of the gradient, pseudo-sync steps with a gradient one step old)
# can reach an accuracy later than sync. What a user wants is the **time to accuracy**.
#
# minips's committed time-to-accuracy study (`docs/bench/time-to-accuracy/`, its grid
# `configs/study-time-to-accuracy.toml`, its reading in `docs/outputs.md`, "Time to
# accuracy") trains eight methods once each: the ConvNet on full Fashion-MNIST at 16 and 64
# virtual ranks, up to 3 seeds (`map.md` there says how many runs are in), evaluated on
# validation every 13 steps. It uses one learning-rate schedule for every method (constant
# after a warm-up). The accuracy after k steps does not depend on the network, only the
# time does. So each run's curve is put on each network's time axis: its evaluation at step
# k sits at k x the method's step time there, which the cost model gives for that P and
# network from the compute each seed measured (mean over the method's seeds). The
# **target** is sync's final validation accuracy (mean over its seeds) less 0.5 points.
# Nothing is trained here; the cells read the committed runs.
#
# Choose a cell of the study: a network, a P, and the model's compute interference phi
# (0: communication overlapped with compute is free; 1: the overlapped part costs compute
# time, as when the CPU drives the network).

# %%
import statistics
import tomllib

from minips.report import projected_step_time

MY_NETWORK, MY_P, MY_PHI = "1gbe", 64, 0.0   # choose: "1gbe", "10gbe" or "ib-edr"; 16 or 64; 0.0 or 1.0

STUDY = ROOT / "docs" / "bench" / "time-to-accuracy"
GRID = tomllib.loads((ROOT / "configs" / "study-time-to-accuracy.toml").read_text())
BASELINE = "sync"
assert MY_NETWORK in GRID["networks"] and MY_P in GRID["ranks"] and MY_PHI in GRID["phis"], (
    f"the study has networks {GRID['networks']}, P in {GRID['ranks']} and phi in {GRID['phis']}: choose among them")


def load_study(P):
    """{method: [summary.json of each seed]} of the committed runs at P, methods in the grid's order;
    a seed that failed (diverged) keeps its short summary, {"status": "diverged", ...}."""
    folder = {a.replace(":", "-"): a for a in GRID["algos"]}   # a run's folder: the method with ":" as "-"
    study = {}
    for f in sorted((STUDY / "runs" / f"P{P}-virtual" / "fixed").glob("*/seed*/summary.json")):
        study.setdefault(folder[f.parent.parent.name], []).append(json.loads(f.read_text()))
    return {m: study[m] for m in GRID["algos"] if m in study}


def step_times(study, network, phi):
    """The cost model's seconds per step of each method (mean over its seeds' measured compute)."""
    return {m: statistics.fmean(projected_step_time(s, network, phi) for s in ss if s.get("steps"))
            for m, ss in study.items() if any(s.get("steps") for s in ss)}


study = load_study(MY_P)
per_step = step_times(study, MY_NETWORK, MY_PHI)
print(f"P = {MY_P}, {MY_NETWORK}, phi = {MY_PHI:g}: the cost model's step time per method")
for m, t in sorted(per_step.items(), key=lambda kv: kv[1]):
    print(f"  {m:24s} {1e3 * t:7.2f} ms")
guess = min(per_step, key=per_step.get)
print(f"fastest per step: {guess}. Is it first to the target? Write down your guess before going on.")

# %% [markdown]
# ## Exercise 10.3: time to the target
#
# Write `time_to_target(curve, step_time_s, target)`: `curve` is a list of `(step,
# accuracy)` evaluations in the order they were made, `step_time_s` the projected seconds
# per step. Return the seconds (`step x step_time_s`) of the **first** evaluation at or
# above `target`, or `None` if no evaluation reaches it. (A curve is noisy: a run that
# reaches the target and then drops below it has still reached it.)

# %%
def time_to_target(curve, step_time_s, target):
    # YOUR CODE HERE
    raise NotImplementedError


# %%
time_to_target = exercise("10.3", time_to_target)


def predict(study, network, phi):
    """The study's rule. Each seed's time to the target; a method is a candidate only when every one of
    its seeds (a diverged seed included) reached it; each candidate is compared with sync on the seeds
    both ran (paired by seed), and the first is the one most below sync on average over them (the grid's
    order breaks ties). Returns (that method, or None when no candidate is below sync,
    {method: {seed: seconds}} of the candidates and sync)."""
    target = statistics.fmean(s["val_accuracy"] for s in study[BASELINE] if s.get("steps")) \
        - GRID["target_below_baseline"] / 100
    times = {}
    for m, t in step_times(study, network, phi).items():
        seeds = {s.get("seed"): time_to_target([(p["step"], p["val_accuracy"]) for p in s.get("curve") or []],
                                               t, target) for s in study[m]}
        if all(x is not None for x in seeds.values()):
            times[m] = seeds
    if BASELINE not in times:   # sync missed its own target on a seed: nothing to pair with (see the map)
        return None, times
    gaps = {m: statistics.fmean(ts[k] - times[BASELINE][k] for k in ts if k in times[BASELINE])
            for m, ts in times.items() if m != BASELINE and set(ts) & set(times[BASELINE])}
    first = min(gaps, key=gaps.get, default=None)   # min keeps the first of equals: the grid's order
    return (first if first is not None and gaps[first] < 0 else None), times


mine, times = predict(study, MY_NETWORK, MY_PHI)
for m in study:
    print(f"  {m:24s} " + (f"{statistics.fmean(times[m].values()):7.2f} s to the target (mean over "
                           f"{len(times[m])} seeds)" if m in times else "   not reached on every seed"))
print(f"the rule's prediction (with your time_to_target) for P = {MY_P}, {MY_NETWORK}, phi = {MY_PHI:g}: "
      + (f"{mine} first" if mine else f"no method before {BASELINE}"))

# %% [markdown]
# Now look: the study's map (`scripts/time_to_accuracy_map.py` draws it from the committed
# runs), one square per network, phi and P.

# %%
show_png(ROOT / "docs" / "figures" / "time-to-accuracy-map.png")
rows = json.loads((STUDY / "map.json").read_text())
row = next(r for r in rows if (r["network"], r["phi"], r["P"]) == (MY_NETWORK, MY_PHI, MY_P))
print(f"the map: {row['winner'] or 'none'} ({row['verdict']}); the rule predicted {mine or 'none'}; "
      f"the fastest step was {guess}")
studies = {P: study if P == MY_P else load_study(P) for P in {r["P"] for r in rows}}
agree = sum(predict(studies[r["P"]], r["network"], r["phi"])[0] == r["winner"] for r in rows)
print(f"your time_to_target with the study's rule names the map's first method in {agree} of {len(rows)} cells")
assert agree == len(rows), ("the rule above should give the map's first method in every cell; if runs were "
                            "added since the map was drawn, rebuild it: python scripts/time_to_accuracy_map.py")

# %% [markdown]
# Where the fastest step is not first to the target, the accuracy per step decided. The map
# also says what the prediction cannot: whether the win is larger than the noise. Its
# verdict pairs the winner's seeds with sync's (the 95 % interval of the per-seed
# differences): **faster** when the whole interval is below zero; **no difference shown**
# when it holds zero, a tie the seeds cannot break; **within one evaluation** when the
# interval excludes zero but the difference is smaller than the time between two evaluations (each seed's time is that
# of its first evaluation above the target, so its true crossing can be up to one interval
# earlier); **one seed** when there is no interval yet; "sync k/n reached" when sync itself
# missed the target on a seed. `map.md` also pairs the default pseudo-sync with
# `overlap-sync` (DDP-style overlap) and with sync, cell by cell. Try another network, P and
# phi above; `docs/choosing.md` ("Time to accuracy at 16 and 64 ranks") turns the map into
# advice.
#
# ## What you saw
#
# - `bench comm` measures the allreduce and fits `alpha`, `beta`; check the fit's quality.
# - Weak-scaling efficiency compares P ranks with one; two ranks on a laptop give one
#   measured point, the cost model gives the curve, and its assumptions say where to be
#   careful; `bench scaling` measures and projects in one command.
# - On a cluster: the site's MPI, one rank per core, threads from minips, SIGTERM ->
#   checkpoint -> requeue -> `--resume`.
# - On a laptop, virtual ranks train 64 ranks in one process with the same algorithm code
#   as `mpiexec -n 64` (the tests find them equal to `mpiexec` at P = 2, 4 and 8); their
#   times are projected, not measured.
# - Time to accuracy: a run's curve on each network's time axis; the fastest step is not
#   always first to the target, and the map says which method is, and whether by more than
#   the noise.
#
# That is the end of the course. Where to go from here: `docs/distributed.md` (every
# algorithm next to its code), `docs/kernels.md`, and the algorithms you can add to
# `minips/distributed/algorithms/` (local SGD, gossip, compression) against the same interface.
