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
# # Step 13: Compression: send fewer bytes, keep what you did not send
#
# **What you will learn**
#
# - **top-k sparsification**: send only the k largest entries of the gradient (8k bytes
#   instead of 4d). It is *biased*: what it drops is lost, and on a small problem with
#   three workers it makes gradient descent **diverge** while the full gradient converges;
# - **error feedback** (Stich, Cordonnier & Jaggi, "Sparsified SGD with Memory", NeurIPS
#   2018): keep what was not sent and add it to the next gradient. The same problem
#   converges, and on a real training run top-k with 0.02 % of the entries trains where it
#   stalls without;
# - **QSGD** (Alistarh et al., NeurIPS 2017): stochastic rounding to s levels is
#   *unbiased*, `E[Q(v)] = v`, at the price of a variance that falls like 1/s^2;
# - **where compression pays**: compressing costs CPU time, so a method wins only on links
#   slower than a **break-even bandwidth**, which we compute with the library's cost model.
#
# **Runs in**: one process (it launches `mpiexec -n 2` itself in section 4), 10 s to 80 s
# (measured with other jobs running, load average 4 to 15-19). **Files to read alongside**:
# `minips/distributed/compression/memory.py` (error feedback), `topk.py`, `qsgd.py`,
# `minips/distributed/algorithms/topk_sgd.py`, `docs/compression.md`, and
# `docs/results.md` section 9.

# %%
import inspect
import json
import time

import matplotlib.pyplot as plt
import numpy as np

from _common import ROOT, exercise, mpiexec, out_dir, pick, say, show
from minips.distributed.algorithms import resolve
from minips.distributed.algorithms.topk_sgd import CompressedSGD
from minips.distributed.compression import ErrorFeedback, NoMemory, make_compressor
from minips.distributed.costmodel import NETWORKS, NetworkModel
from minips.labs.projection import StepProfile
from minips.models import ConvNet

OUT = out_dir("13")
T0 = time.perf_counter()

# %% [markdown]
# ## 1. Compressor, memory, exchange
#
# minips splits compressed communication in three pieces, as GRACE does (Xu et al., ICDCS
# 2021), so any compressor runs with any method: a **compressor** (`compress(v, step)` ->
# payload, `decompress(payload)` -> a dense vector), a **memory** (error feedback on or
# off) and an **exchange** (allreduce when payloads can be summed, else an allgather).
# `topk-sgd` and `qsgd` are the same step with different compressors (and for `qsgd`
# error feedback off by default):

# %%
say(inspect.getsource(CompressedSGD.step))
say(inspect.getsource(ErrorFeedback.compress))

# %% [markdown]
# Top-k keeps the k entries of largest magnitude, as k float32 values and k int32 indices:

# %%
topk = make_compressor("topk:k=2")
v = np.array([0.5, -3.0, 0.1, 2.0, -0.2], np.float32)
p = topk.compress(v)
say(f"v = {v},  payload values {p.arrays[0]}, indices {p.arrays[1]}, {topk.nbytes(p)} bytes "
    f"(v itself: {v.nbytes})")
say(f"decompress(compress(v)) = {topk.decompress(p)}")

# %% [markdown]
# ## 2. Watch top-k fail without error feedback
#
# Three workers, d = 3, worker i minimises `f_i(x) = (a_i . x)^2 + ||x||^2 / 2` with
# `a_1 = (-4, 3, 3)`, `a_2 = (3, -4, 3)`, `a_3 = (3, 3, -4)` (after Beznosikov, Horvath,
# Richtarik & Safaryan, "On Biased Compression for Distributed Learning", 2020, Example 1).
# Every `f_i` is strongly convex and the minimum of their mean is x = 0. Distributed
# gradient descent with top-1: each worker sends the largest entry of its gradient, the
# mean of the three messages is applied.
#
# Work it out by hand from `x = t (1, 1, 1)`: `a_i . x = 2t`, so
# `grad f_i(x) = 4t a_i + x`, with entries `-15t` at position i and `13t` elsewhere. Top-1
# keeps the `-15t`; the three messages average to `-5t (1, 1, 1)`, and a step gives
# `x = t (1 + 5 lr) (1, 1, 1)`: **x grows geometrically for every learning rate**. The
# full mean gradient, `(11/3) t (1, 1, 1)`, points the other way. The information is not
# lost by one step: it is lost because the `13t` entries are never sent, step after step.
#
# We run it with the library's top-k compressor, once with `NoMemory` (the `topk-sgd`
# option `error-feedback=false`) and once with `ErrorFeedback`.

# %%
A3 = np.array([[-4.0, 3, 3], [3, -4, 3], [3, 3, -4]])


def worker_grad(i, x):
    return (2 * A3[i] * (A3[i] @ x) + x).astype(np.float32)


def objective(x):
    return float(np.mean((A3 @ x) ** 2) + 0.5 * x @ x)


def distributed_gd(memories, steps, lr=0.05):
    """GD on the three workers' mean top-1 compressed gradient; memories[i] compresses worker i's."""
    compressor = make_compressor("topk:k=1")
    x = np.ones(3)
    path = [objective(x)]
    for t in range(steps):
        msgs = [compressor.decompress(memories[i].compress(compressor, worker_grad(i, x), t)) for i in range(3)]
        x = x - lr * np.mean(msgs, axis=0)
        path.append(objective(x))
    return x, np.array(path)


steps_toy = 100
x_no, f_no = distributed_gd([NoMemory(3) for _ in range(3)], steps_toy)
x_ef, f_ef = distributed_gd([ErrorFeedback(3) for _ in range(3)], steps_toy)
x_gd = np.ones(3)
f_gd = [objective(x_gd)]
for _ in range(steps_toy):
    x_gd = x_gd - 0.05 * np.mean([worker_grad(i, x_gd) for i in range(3)], axis=0)
    f_gd.append(objective(x_gd))
say(f"after {steps_toy} steps, lr 0.05 (start: f = {f_no[0]:.3g})")
say(f"  uncompressed GD         : f = {f_gd[-1]:.3g}")
say(f"  top-1 without feedback  : f = {f_no[-1]:.3g}, x = {x_no}")
say(f"  top-1 with feedback     : f = {f_ef[-1]:.3g}")
growth = f_no[1:] / f_no[:-1]
say(f"per-step growth of f without feedback: {growth.min():.4f}..{growth.max():.4f}; "
    f"by hand (1 + 5 lr)^2 = {(1 + 5 * 0.05) ** 2:.4f}")
assert np.allclose(growth, (1 + 5 * 0.05) ** 2, rtol=1e-5)   # the hand analysis, step after step
assert f_ef[-1] < 1e-6 * f_ef[0]

fig, ax = plt.subplots(figsize=(7.5, 4))
ax.semilogy(f_gd, "k-", lw=1.5, label="uncompressed gradient descent")
ax.semilogy(f_no, "--", lw=1.8, label="top-1, no error feedback")
ax.semilogy(f_ef, "-", lw=1.8, label="top-1 with error feedback")
ax.set_xlabel("step (lr 0.05)")
ax.set_ylabel("mean objective f(x) (log scale)")
ax.set_title("3 workers, top-1 of 3 entries: the bias of top-k, and its fix")
ax.grid(alpha=0.3, which="both")
ax.legend(fontsize=8)
show(fig, OUT / "topk_counterexample.png")

# %% [markdown]
# With error feedback the dropped `13t` entries pile up in the memory until they are the
# largest entry of `m + g` and get sent: nothing is lost, only delayed. The delay has a
# cost (error feedback converges more slowly than the uncompressed gradient here), but
# the direction is right on average. The invariant
# behind it, in exact arithmetic:
#
#     sum over steps of what was sent  +  the memory now  =  sum over steps of the gradients
#
# ## 3. Exercise 13.1: the error-feedback step
#
# Write one step of error feedback for one worker. `g` is the new gradient, `e` the
# error memory (both NumPy arrays of shape `(d,)`), `compress(v)` returns the compressed
# vector in dense form (e.g. top-k's kept entries and zeros elsewhere). Compute
# `v = g + e`, call `compress` **once**, return what is sent, `C(v)`, and leave the
# residual `v - C(v)` in `e` **in place** (the caller keeps the same array from step to
# step, as `ErrorFeedback` keeps `self.m`). Do not modify `g`.

# %%
def error_feedback_step(g, e, compress):
    """Send C(g + e); update e in place to (g + e) - C(g + e). Returns the sent vector (d,)."""
    raise NotImplementedError  # your code here


# %%
error_feedback_step = exercise("13.1", error_feedback_step)

# %% [markdown]
# Your step on the three-worker problem, against the library's `ErrorFeedback`:

# %%
C1 = make_compressor("topk:k=1")


def compress_dense(v):
    return C1.decompress(C1.compress(np.asarray(v, np.float32)))


x = np.ones(3)
errors = [np.zeros(3, np.float32) for _ in range(3)]
sent_sum = [np.zeros(3) for _ in range(3)]
grad_sum = [np.zeros(3) for _ in range(3)]
for _ in range(steps_toy):
    msgs = []
    for i in range(3):
        g = worker_grad(i, x)
        msgs.append(error_feedback_step(g, errors[i], compress_dense))
        sent_sum[i] += msgs[-1]
        grad_sum[i] += g
    x = x - 0.05 * np.mean(msgs, axis=0)
say(f"your error feedback: f = {objective(x):.3g} after {steps_toy} steps; the library's: {f_ef[-1]:.3g}")
gap = max(float(np.max(np.abs(sent_sum[i] + errors[i] - grad_sum[i])) / np.max(np.abs(grad_sum[i])))
          for i in range(3))
say(f"sum sent + memory vs sum of gradients, largest relative difference over workers: {gap:.1e} "
    "(float32 rounding)")
assert gap < 1e-5 and abs(objective(x) - f_ef[-1]) <= 1e-3 * f_ef[-1]

# %% [markdown]
# ## 4. On a network: top-k SGD with and without error feedback
#
# The real `topk-sgd`, two ranks, the MLP on the mini Fashion-MNIST set, three epochs:
# sync, and top-k keeping 0.02 % of the gradient (41 of the MLP's 203530 entries per step),
# with error feedback (the default) and without (`error-feedback=false`). `compare` runs
# them one after the other on the same data and seed.

# %%
algos = "sync,topk-sgd:ratio=0.0002,topk-sgd:ratio=0.0002:error-feedback=false"
mpiexec(2, ["-m", "minips", "compare", "--algos", algos, "--model", "mlp", "--epochs", pick(3, 1),
            "--out", OUT / "compare", "--quiet", "--overwrite", *pick([], ["--max-steps", 8, "--no-figures"])],
        quiet=True)
summaries = json.loads((OUT / "compare" / "compare.json").read_text())
base = summaries[0]["bytes_sent_per_step"]
say(f"{'algorithm':42s} {'test acc':>8s} {'test loss':>9s} {'bytes/step':>11s} {'vs sync':>8s}")
for s in summaries:
    say(f"{s['label']:42s} {s['test_accuracy']:8.4f} {s['test_loss']:9.4f} {s['bytes_sent_per_step']:11.0f} "
        f"{s['bytes_sent_per_step'] / base:8.4f}")


# %%
def train_loss(label):
    """Per-step training loss of a run (rank 0's trace), smoothed over 40 steps (2 in fast mode)."""
    window = pick(40, 2)
    rows = np.genfromtxt(OUT / "compare" / label.replace(":", "-") / "trace.csv", delimiter=",", names=True)
    loss = np.atleast_1d(rows["loss"])
    smooth = np.convolve(loss, np.ones(window) / window, mode="valid")
    return np.arange(window, len(loss) + 1), smooth


fig, ax = plt.subplots(figsize=(8, 4.2))
for s, style in zip(summaries, ("-", "--", ":")):
    ax.plot(*train_loss(s["label"]), style, lw=1.8, label=f"{s['label']} (test acc {s['test_accuracy']:.3f})")
ax.set_xlabel("step")
ax.set_ylabel("training loss (running mean)")
ax.set_title("MLP, 2 ranks: top-k 0.02 % with and without error feedback")
ax.grid(alpha=0.3)
ax.legend(fontsize=8)
show(fig, OUT / "topk_error_feedback.png")

# %% [markdown]
# When we ran it (3 epochs, 468 steps, one seed) sync ended at test accuracy 0.847, top-k
# with error feedback at 0.827 and without at 0.768. The training loss tells the story:
# for the first 200 steps error feedback is *behind* (its memory releases large, stale
# entries in bursts), then it passes below and keeps falling, while without feedback the
# loss flattens out near 0.65. Both top-k runs send 328 bytes per rank and step (41 values
# and 41 indices) instead of sync's 814120: error feedback costs no bytes, only a memory
# of d floats per rank. Without it, the small but consistent gradient entries of most
# weights are never sent, and those weights barely move. One seed; `docs/compression.md`
# has the ConvNet at 4 ranks.
#
# ## 5. QSGD: unbiased by stochastic rounding
#
# QSGD splits v into buckets, and in each bucket with norm `n = ||v_b||` replaces entry j
# by `n sign(v_j) l_j / s`, where `l_j` is `s |v_j| / n` rounded **down or up at random**,
# up with probability equal to the fractional part. So `E[l_j] = s |v_j| / n` exactly and
# `E[Q(v)] = v`: no memory is needed. The price is variance: an entry with fractional part
# p has variance `(n / s)^2 p (1 - p)`, and summing those gives the exact expected error
# `E ||Q(v) - v||^2` for a given v. The paper bounds it by `min(d/s^2, sqrt(d)/s) ||v||^2`
# per bucket of d entries.
#
# The rounding draws are a function of `(seed, rank, step)`, so we get independent
# quantizations of the same vector by changing the step.

# %%
rng = np.random.default_rng(13)
d_q = 512
vq = rng.standard_normal(d_q).astype(np.float32)
N = pick(4000, 400)


def quantizations(s, n):
    q = make_compressor(f"qsgd-quant:s={s}:bucket={d_q}")
    return np.stack([q.decompress(q.compress(vq, step)) for step in range(n)]).astype(np.float64)


def exact_variance(v, s):
    """E ||Q_s(v) - v||^2 for one bucket, from the rounding probabilities."""
    v = v.astype(np.float64)
    r = s * np.abs(v) / np.linalg.norm(v)
    frac = r - np.floor(r)
    return float((np.linalg.norm(v) / s) ** 2 * np.sum(frac * (1 - frac)))


Q = quantizations(4, N)
say(f"one quantization with s = 4 takes {len(np.unique(Q[0]))} distinct values: "
    f"{np.unique(np.round(Q[0], 4))}")
Ns = np.unique(np.geomspace(1, N, 12).astype(int))
mean_err = [float(np.linalg.norm(Q[:n].mean(axis=0) - vq) / np.linalg.norm(vq)) for n in Ns]
for n, err in zip(Ns, mean_err):
    say(f"  mean of {n:5d} quantizations: relative distance to v {err:.4f}")
sigma = np.sqrt(exact_variance(vq, 4)) / np.linalg.norm(vq)
say(f"expected for an unbiased quantizer: sqrt(E||Q - v||^2 / N) / ||v|| = {sigma:.4f} / sqrt(N)")
topk_q = make_compressor("topk:ratio=0.05")
tk = topk_q.decompress(topk_q.compress(vq))
say(f"top-k (5 %), for contrast, is deterministic: the mean of any number of its outputs stays at "
    f"relative distance {np.linalg.norm(tk - vq) / np.linalg.norm(vq):.3f} from v")

# %%
s_values = (1, 2, 4, 8, 16, 32, 64)
emp, exact, bound = [], [], []
for s in s_values:
    Qs = quantizations(s, pick(1000, 100))
    emp.append(float(np.mean(np.sum((Qs - vq) ** 2, axis=1))))
    exact.append(exact_variance(vq, s))
    bound.append(min(d_q / s**2, np.sqrt(d_q) / s) * float(vq.astype(np.float64) @ vq))
say(f"{'s':>3s} {'bits':>4s} {'bytes':>6s} {'measured E||Q-v||^2':>20s} {'exact':>9s} {'paper bound':>12s}")
for s, a, b, c in zip(s_values, emp, exact, bound):
    q = make_compressor(f"qsgd-quant:s={s}:bucket={d_q}")
    say(f"{s:3d} {q.bits:4d} {q.payload_bytes(d_q):6d} {a:20.2f} {b:9.2f} {c:12.1f}")
worst = max(abs(a - b) / b for a, b in zip(emp, exact))
say(f"largest relative gap measured vs exact: {worst:.3f}")
assert worst < pick(0.1, 0.3)

fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
a1.loglog(Ns, mean_err, "o-", label="mean of N quantizations (s = 4)")
a1.loglog(Ns, sigma / np.sqrt(Ns), "k--", label="unbiased: sigma / sqrt(N)")
a1.set_xlabel("N (quantizations averaged)")
a1.set_ylabel("||mean - v|| / ||v||")
a1.set_title("QSGD is unbiased: the mean approaches v")
a1.grid(alpha=0.3, which="both")
a1.legend(fontsize=8)
a2.loglog(s_values, emp, "o", label="measured")
a2.loglog(s_values, exact, "-", label="exact, from the rounding probabilities")
a2.loglog(s_values, bound, ":", label="paper's bound")
a2.set_xlabel("s (levels)")
a2.set_ylabel("E ||Q(v) - v||^2")
a2.set_title(f"variance vs s (d = {d_q}, one bucket)")
a2.grid(alpha=0.3, which="both")
a2.legend(fontsize=8)
show(fig, OUT / "qsgd.png")

# %% [markdown]
# The mean's distance to v falls like `1/sqrt(N)`, on the line an unbiased quantizer must
# follow; top-k's does not move. The variance falls like `1/s^2` once s is large (each
# doubling of s costs one more bit per entry); at small s most entries round between 0 and
# the first level, and the `sqrt(d)/s` branch of the bound is the tighter one. With
# `qsgd:s=15` (5 bits, the library's default) a gradient step carries about 1/6 of the
# float32 bytes plus one norm per 512 entries.
#
# ## 6. Where compression pays: the break-even link speed
#
# Compression trades bytes for CPU time: top-k's selection, QSGD's rounding and bit
# packing, and after an allgather the decoding of P payloads. Each method's cost model
# (`step_time`, next to its update rule; `bench scaling` projects with the same models)
# charges both, with per-entry CPU costs measured on one thread
# (`docs/bench/compression/compress-time.json`). Compute (forward, backward) is the same
# for a method and sync, so we set it to 0 and compare what remains. For the ConvNet of
# steps 3-8 (d = 421642) at P = 8:

# %%
model = ConvNet()
shapes = tuple(tuple(p.shape) for p in model.parameters())
profile = StepProfile(forward=0.0, backward=0.0, grad_bytes=4 * model.num_parameters(), shapes=shapes)
methods = ("topk-sgd:ratio=0.01", "powersgd:rank=2", "qsgd:s=15")
P = 8


def comm_ms(spec, net):
    return 1e3 * resolve(spec).step_time(profile, P, net)


say(f"{'':22s} " + " ".join(f"{NETWORKS[n].name:>10s}" for n in ("1gbe", "10gbe", "ib-edr")))
for spec in ("sync", *methods):
    say(f"{spec:22s} " + " ".join(f"{comm_ms(spec, NETWORKS[n]):8.2f}ms" for n in ("1gbe", "10gbe", "ib-edr")))

# %% [markdown]
# Both times are linear in beta (seconds per byte), at a fixed latency alpha:
# `T(beta) = T(0) + beta T'`, with `T(0)` the compression compute plus the latencies
# and `T'` the bytes on the critical path. The method wins when
# `T_method(beta) < T_sync(beta)`, i.e. for `beta > beta* = (T_m(0) - T_s(0)) / (T_s' - T_m')`:
# links slower than `8 / beta*` bits per second. Two evaluations of each model give
# the line; we check it against `scripts/breakeven_compression.py`, which bisects
# (`docs/bench/compression/breakeven.json`).

# %%
alpha = NETWORKS["10gbe"].alpha


def breakeven_gbit(spec, P=P, alpha=alpha):
    """Link speed (Gb/s) below which `spec` beats sync in the cost model (inf: always; 0: never)."""
    def t(name, beta):
        return resolve(name).step_time(profile, P, NetworkModel(alpha, beta))
    b1 = 1e-9
    s0, m0 = t("sync", 0.0), t(spec, 0.0)
    s_slope, m_slope = (t("sync", b1) - s0) / b1, (t(spec, b1) - m0) / b1
    if m0 <= s0:
        return float("inf") if m_slope <= s_slope else 8 / ((s0 - m0) / (m_slope - s_slope)) / 1e9
    if m_slope >= s_slope:
        return 0.0
    return 8 / ((m0 - s0) / (s_slope - m_slope)) / 1e9


recorded = {(r["method"], r["P"]): r["breakeven_gbit_s"]
            for r in json.loads((ROOT / "docs/bench/compression/breakeven.json").read_text())["rows"]}
for spec in methods:
    for p_ in (4, 8, 64):
        be = breakeven_gbit(spec, p_)
        rec = recorded[(spec, p_)]
        rec = float("inf") if rec is None else rec
        where = "never pays" if be == 0 else "pays at any speed" if be == float("inf") else f"pays below {be:7.3f} Gb/s"
        say(f"{spec:22s} P = {p_:2d}: {where:24s} (breakeven.json: {rec:.3f} Gb/s)")
        assert (be == rec == 0.0) or abs(be - rec) <= 1e-3 * rec   # a line and a bisection agree

# %%
gbits = np.geomspace(0.1, 200, 200)
fig, ax = plt.subplots(figsize=(8, 4.5))
for spec, style in zip(("sync", *methods), ("k-", "-", "--", ":")):
    ax.loglog(gbits, [comm_ms(spec, NetworkModel(alpha, 8 / (g * 1e9))) for g in gbits], style, lw=1.8,
              label=spec)
for spec in methods[:2]:
    be = breakeven_gbit(spec)
    ax.axvline(be, color="grey", lw=0.8)
    ax.annotate(f"{spec.split(':')[0]}\npays below\n{be:.1f} Gb/s", (be, 0.97), xycoords=("data", "axes fraction"),
                fontsize=8, ha="right", va="top", xytext=(-4, 0), textcoords="offset points")
ax.set_xlabel("link bandwidth (Gb/s), latency 10 us")
ax.set_ylabel("ms per step, compute excluded")
ax.set_title(f"cost model, ConvNet (d = {model.num_parameters()}), P = {P}")
ax.grid(alpha=0.3, which="both")
ax.legend(fontsize=8)
show(fig, OUT / "breakeven.png")

# %% [markdown]
# Read it from the right: on fast links every curve is flat at its compute-and-latency
# floor, and sync's floor is lowest because it compresses nothing. Moving left, sync's
# bytes start to cost and its curve rises until it crosses each method's: PowerSGD r = 2
# (0.19 ms of compression, 2 % of the bytes) pays below about 70 Gb/s, so on 10 GbE;
# top-k 1 % (4.7 ms, most of it the O(d) selection) only below about 5 Gb/s, i.e. on
# 1 GbE; QSGD, whose P decodes after the allgather grow with P, only below a fraction of
# a Gb/s. A faster compressor kernel moves the break-even up in proportion.
# `docs/results.md` section 9.2 has the table for all nine methods, and
# `python -m minips bench scaling` projects whole step times to 1024 nodes with the
# same models.
#
# **Where next**: `python -m minips algorithms` lists every compressor and method option
# (`topk-sgd:compressor=randomk`, `powersgd:rank=4`, `choco-sgd` for compressed gossip),
# and `docs/compression.md` describes the nine compression methods next to their code.
# `docs/choosing.md` weighs every family against the others (which algorithm when), from
# the side-by-side study of `docs/results.md` section 10.

# %%
say(f"step 13 done in {time.perf_counter() - T0:.0f} s")
