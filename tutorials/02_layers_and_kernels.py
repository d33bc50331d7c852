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
# # Step 2: Layers, and the Numba kernels behind them
#
# **What you will learn**
#
# - how `Module`, `Parameter` and `Sequential` organise a network's weights (as in PyTorch);
# - what a 2-D convolution computes, and how minips computes it fast: **im2col** turns it
#   into one matrix product that BLAS does at high speed; **col2im** brings the gradient back;
# - what Numba does (compile a Python loop nest to machine code, in parallel) and what it
#   costs (compilation, once);
# - how fast the Numba kernels are against their plain-NumPy twins, on the layer shapes of
#   the ConvNet you will train in step 3;
# - where the ConvNet's parameters are (this decides how many bytes MPI must move in steps 5-10).
#
# **Runs in**: one process, under a minute. **Files to read alongside**:
# `minips/nn/module.py`, `minips/nn/layers.py`, `minips/nn/conv.py` (Conv2d), `minips/models/convnet.py` (ConvNet),
# `kernels/conv.py` (the kernels; installed as `minips.kernels.conv`),
# `kernels/reference.py` (their NumPy twins: the readable specification), and
# `docs/kernels.md` (the derivations of the backward passes, what made the kernels fast,
# threads, and measured numbers).

# %%
import inspect
import time

from _common import FAST, exercise, out_dir, pick, show  # first: it sets the thread counts before Numba loads

import matplotlib.pyplot as plt
import numpy as np
from numba import njit

import minips as mp
from minips import nn
from minips.bench.kernels import time_call
from minips.gradcheck import gradcheck
from minips.kernels import conv as kconv
from minips.kernels import pool as kpool
from minips.kernels import reference as ref
from minips.kernels.threads import threads_per_rank
from minips.models import ConvNet
from minips.nn.conv import conv2d

OUT = out_dir("02")
rng = np.random.default_rng(0)

# %% [markdown]
# ## 1. Modules and parameters
#
# A `Parameter` is a leaf tensor with `requires_grad=True` (float32). A `Module` registers
# every `Parameter` or sub-`Module` assigned to one of its attributes, so
# `model.parameters()` finds them all, **in the order they were assigned**. That order
# matters later: the distributed code lays the gradients out in one buffer in the
# *reverse* of it (step 6).

# %%
layer = nn.Linear(4, 3)
print(layer)
for name, p in layer.named_parameters():
    print(f"  {name:7s} {p.shape}  {p.dtype}")

mlp = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
x = mp.Tensor(rng.standard_normal((5, 1, 28, 28)).astype(np.float32))
print("MLP output:", mlp(x).shape, "| parameters:", mlp.num_parameters())

# %% [markdown]
# `Linear.forward` is just `x @ W.T + b` with the ops of step 1, so autograd differentiates
# it for free. The convolution is different: written with elementwise ops it would build an
# enormous graph. So `Conv2d` is one autograd `Function` (`Conv2dFunction` in
# `minips/nn/conv.py`) whose forward and backward call Numba kernels.
#
# ## 2. What a convolution computes
#
# Input `x` (N, C, H, W): N images, C channels. Weights `w` (K, C, R, S): K filters of C x R x S.
# Each output pixel is a dot product of one filter with the input patch under it:
#
# `y[n, k, p, q] = b[k] + sum over c, r, s of w[k, c, r, s] * x[n, c, p*stride + r - pad, q*stride + s - pad]`
#
# `kernels/reference.py::conv2d_forward` computes exactly this with NumPy, one kernel
# offset `(r, s)` at a time. It is the **specification**; the tests check the fast kernels
# against it.
#
# ## 3. im2col: a convolution is a matrix product
#
# Copy every input patch that one output pixel sees into one **column** of a matrix
# `cols` of shape (C*R*S, N*P*Q). Then every output is a filter (a row of
# `w.reshape(K, C*R*S)`) times a column: the whole convolution is **one matrix product**,
# done by BLAS, the fastest code on the machine. On a 4x4 image with a 3x3 kernel there are
# 2x2 output pixels, so 4 columns of 9 values:

# %%
x_small = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
g_small = kconv.geometry(x_small.shape, (1, 1, 3, 3), stride=1, padding=0)
print("input plane:\n", x_small[0, 0])
print("geometry:", g_small)
print("im2col columns (one per output pixel):\n", kconv.im2col(x_small, g_small))

# %% [markdown]
# Column 0 is the top-left 3x3 patch (0 1 2 / 4 5 6 / 8 9 10), read row by row. Here is
# the Numba kernel that fills `cols` (`kernels/conv.py::_im2col`): a plain loop nest, with
# `prange` spreading the (image, channel) planes over threads. (`_u(...)` casts an index to
# unsigned, which lets the compiler vectorise the inner loop: `docs/kernels.md`, "Making
# Numba code fast".)

# %%
print(inspect.getsource(kconv._im2col.py_func))

# %% [markdown]
# The backward pass needs two more matrix products with the same matrices:
# `dL/dw = dL/dy2 @ cols.T` and `dL/dcols = w2.T @ dL/dy2`, and then **col2im**, the
# *adjoint* of im2col: it adds each column entry back into the input pixel it was copied
# from (an input pixel that appears in several patches receives the sum). "Adjoint" has a
# precise meaning that we can check numerically: for any `x` and any `c`,
# `<im2col(x), c> = <x, col2im(c)>`.

# %%
g = kconv.geometry((2, 3, 7, 6), (4, 3, 3, 3), stride=2, padding=1)
xa = rng.standard_normal((2, 3, 7, 6))
ca = rng.standard_normal((g.C * g.R * g.S, g.N * g.P * g.Q))
lhs = float((kconv.im2col(xa, g) * ca).sum())
rhs = float((xa * kconv.col2im(ca, g)).sum())
print(f"<im2col(x), c> = {lhs:.10f}\n<x, col2im(c)> = {rhs:.10f}")

# %% [markdown]
# For the first layer of a network on grey images (C = 1, so C*R*S = 9) the matrix product
# is too thin for BLAS to shine and copying dominates, so `conv2d_forward` switches to a
# **direct** loop nest (`kernels/conv.py::use_direct`, `_direct_forward`). Same result.
#
# And a convolution layer passes `gradcheck` like any op (float64; the kernels are compiled
# for both float32 and float64):

# %%
xg, wg, bg = rng.standard_normal((2, 2, 5, 5)), rng.standard_normal((3, 2, 3, 3)), rng.standard_normal(3)
print("Conv2d gradcheck, stride 2, padding 1:", gradcheck(lambda x, w, b: conv2d(x, w, b, stride=2, padding=1),
                                                          [xg, wg, bg]))

# %% [markdown]
# ## 4. What Numba does, and what it costs
#
# `@njit` compiles a Python function to machine code the first time it is called with a
# given combination of argument types; `parallel=True` turns `prange` loops into threads.
# Compilation takes a while, so minips' kernels use `cache=True`: the machine code is saved
# next to the source (`kernels/__pycache__/*.nbi, *.nbc`) and the next process loads it.
# (`NUMBA_DISABLE_JIT=1` turns every kernel back into plain Python, for a debugger.)
#
# A tiny function shows the cost of the first call:

# %%
@njit
def relu_loop(x, y):
    for i in range(x.size):
        y[i] = x[i] if x[i] > 0 else 0.0


v = rng.standard_normal(1_000_000).astype(np.float32)
out = np.empty_like(v)
for call in ("first call (compiles)", "second call", "third call"):
    t0 = time.perf_counter()
    relu_loop(v, out)
    print(f"{call:22s} {1e3 * (time.perf_counter() - t0):8.2f} ms")

# %% [markdown]
# Each process uses `cores // ranks on the node` Numba threads (and as many BLAS threads):
# `kernels/threads.py::threads_per_rank`. With 2 MPI ranks on a 2-core laptop each rank gets
# 1 thread; more would make threads fight for cores ("oversubscription"), which can make a
# step many times slower. `NUMBA_NUM_THREADS` overrides it.

# %%
print("threads per rank here, for 1 and 2 ranks on this node:", threads_per_rank(1), threads_per_rank(2))

# %% [markdown]
# ## 5. How fast? Numba kernels against their NumPy twins
#
# We time the two convolutions of the ConvNet (step 3) at batch 64, forward alone and
# forward + backward, plus its max pooling and ReLU: the Numba kernels (`minips.kernels.*`)
# against the NumPy twins (`kernels/reference.py`). `time_call` (from
# `minips/bench/kernels/timing.py`) reports the best of several runs: on a shared machine, other
# programs only ever *add* time. The full table, with GFLOP/s and the fraction of this CPU's
# peak, is `python -m minips bench kernels`.

# %%
N = pick(64, 8)
cases = []
for C, K, H in ((1, 32, 28), (32, 64, 14)):
    xc, wc, bc = (rng.standard_normal(s).astype(np.float32) for s in ((N, C, H, H), (K, C, 3, 3), (K,)))
    gy = rng.standard_normal((N, K, H, H)).astype(np.float32)
    need_x = C > 1  # the first layer needs no gradient for the input images

    def nb_fb(xc=xc, wc=wc, bc=bc, gy=gy, need_x=need_x):
        _, saved = kconv.conv2d_forward(xc, wc, bc, 1, 1)
        kconv.conv2d_backward(gy, wc, saved, need_x=need_x)

    def np_fb(xc=xc, wc=wc, bc=bc, gy=gy, need_x=need_x):
        ref.conv2d_forward(xc, wc, bc, 1, 1)
        ref.conv2d_backward_weight(gy, xc, wc.shape, 1, 1)
        if need_x:
            ref.conv2d_backward_data(gy, wc, xc.shape, 1, 1)

    cases.append((f"conv {C}->{K} fwd", lambda xc=xc, wc=wc, bc=bc: kconv.conv2d_forward(xc, wc, bc, 1, 1),
                  lambda xc=xc, wc=wc, bc=bc: ref.conv2d_forward(xc, wc, bc, 1, 1)))
    cases.append((f"conv {C}->{K} fwd+bwd", nb_fb, np_fb))
xp = rng.standard_normal((N, 32, 28, 28)).astype(np.float32)
cases.append(("maxpool 2x2 fwd", lambda: kpool.maxpool2d_forward(xp, 2, 2), lambda: ref.maxpool2d_forward(xp, 2, 2)))
from minips.kernels import elementwise as kew  # noqa: E402

cases.append(("relu fwd", lambda: kew.relu_forward(xp), lambda: ref.relu_forward(xp)))

reps = dict(min_reps=2, min_seconds=0.0) if FAST else dict(min_reps=3, min_seconds=0.3)
rows = [(name, time_call(fnb, **reps), time_call(fnp, **reps)) for name, fnb, fnp in cases]
print(f"batch {N}, {threads_per_rank(1)} thread(s)")
print(f"{'operation':24s}{'numba ms':>10s}{'numpy ms':>10s}{'speed-up':>10s}")
for name, tn, tp in rows:
    print(f"{name:24s}{tn:10.2f}{tp:10.2f}{tp / tn:9.1f}x")

fig, ax = plt.subplots(figsize=(8, 4))
pos = np.arange(len(rows))
ax.barh(pos - 0.2, [r[1] for r in rows], 0.4, label="Numba kernel (minips.kernels)")
ax.barh(pos + 0.2, [r[2] for r in rows], 0.4, label="NumPy twin (kernels/reference.py)")
ax.set_yticks(pos, [r[0] for r in rows])
ax.invert_yaxis()
ax.set_xscale("log")
ax.set_xlabel(f"milliseconds, best of several runs (batch {N}; log scale)")
ax.set_title("the ConvNet's layers: Numba vs NumPy")
ax.legend()
show(fig, OUT / "numba_vs_numpy.png")

# %% [markdown]
# Reading the figure: the NumPy twins are written for clarity (a Python loop over kernel
# offsets or pooling windows, temporary arrays); the Numba kernels do the same arithmetic
# in one pass over memory, in parallel, and hand the big matrix products to BLAS. The
# exact numbers depend on your CPU and on what else is running.
#
# ### More threads are not always faster
#
# A parallel kernel splits its loop over threads and then waits for the *slowest* one.
# If another program (or another MPI rank) is using a core, one thread is descheduled and
# everyone waits for it: on a busy machine, 2 threads can be much *slower* than 1. Compare
# on your machine (`numba.set_num_threads` and `threadpoolctl` set the Numba and BLAS
# threads; `minips.bench.kernels.set_threads` does both):

# %%
from minips.bench.kernels import set_threads  # noqa: E402

name, fnb, _ = cases[3]
for n in sorted({1, threads_per_rank(1)}):
    set_threads(n)
    print(f"{name} with {n} thread(s): {time_call(fnb, **reps):7.2f} ms")
set_threads(threads_per_rank(1))
if threads_per_rank(1) == 1:
    print("(one thread only: NUMBA_NUM_THREADS is set, or this machine has one core; "
          "try NUMBA_NUM_THREADS=2 python tutorials/02_layers_and_kernels.py)")

# %% [markdown]
# If 1 thread wins on your machine, something else is using the cores; set
# `NUMBA_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1` before running the next steps.
#
# ## 6. Where are the ConvNet's parameters?

# %%
model = ConvNet()
print(model)
names = [n for n, _ in model.named_parameters()]
sizes = [p.size for _, p in model.named_parameters()]
print(f"total: {model.num_parameters():,} parameters = {4 * model.num_parameters() / 2**20:.2f} MiB of float32")

fig, ax = plt.subplots(figsize=(7, 3.5))
ax.barh(names, sizes)
ax.set_xscale("log")
ax.invert_yaxis()
for i, s in enumerate(sizes):
    ax.text(s, i, f" {s:,}", va="center", fontsize=8)
ax.set_xlabel("number of parameters (log scale)")
ax.set_title("ConvNet parameters by tensor")
show(fig, OUT / "convnet_parameters.png")

# %% [markdown]
# The convolutions do most of the *arithmetic* (each weight is used at every pixel), but
# the first `Linear` layer (3136 -> 128) holds 95% of the *parameters*. In data-parallel
# training every step averages all gradients over the network, so that one layer is
# what MPI spends its time on. Keep that in mind for steps 5-10.
#
# ## Exercise 2.1: a convolution with im2col
#
# Write the forward pass of a convolution as ONE matrix product, using
# `minips.kernels.conv.geometry` (the sizes: `g.N, g.K, g.P, g.Q`, ...) and
# `minips.kernels.conv.im2col(x, g)` (returns `cols`, shape (C*R*S, N*P*Q), columns ordered
# n, then p, then q). Return `y` of shape (N, K, P, Q). The check compares it with the
# NumPy reference on several shapes, with stride and padding.

# %%
def conv2d_im2col(x, w, b, stride, padding):
    """x (N, C, H, W), w (K, C, R, S), b (K,) -> y (N, K, P, Q)."""
    g = kconv.geometry(x.shape, w.shape, stride, padding)
    # YOUR CODE HERE
    raise NotImplementedError


# %%
conv2d_im2col = exercise("2.1", conv2d_im2col)


# %% [markdown]
# ## Exercise 2.2: count the ConvNet's parameters
#
# Read `ConvNet.__init__` in `minips/models/convnet.py` and write the number of parameters as a
# formula of its arguments (two 3x3 convolutions with padding 1, each followed by a 2x2
# max pooling; then Linear -> hidden, Linear -> classes; every layer has a bias). The
# check compares it with `ConvNet(...).num_parameters()` for several settings.

# %%
def convnet_num_parameters(in_channels, image_size, num_classes, widths, hidden):
    H, W = image_size
    c1, c2 = widths
    # YOUR CODE HERE
    raise NotImplementedError


# %%
convnet_num_parameters = exercise("2.2", convnet_num_parameters)

# %% [markdown]
# ## What you saw
#
# - A `Module` is a tree of `Parameter`s; `parameters()` lists them in assignment order.
# - A convolution is im2col + one BLAS matrix product (or a direct loop for thin inputs);
#   its backward is two more products and col2im, the adjoint of im2col.
# - Numba compiles loop nests once (cached on disk) and runs them in parallel; every
#   kernel has a NumPy twin that is the spec and the test oracle.
# - The ConvNet's parameters, and so its gradient traffic, sit mostly in one layer.
#
# **Next**: step 3 trains this ConvNet on Fashion-MNIST.
