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
# # Step 3: Train a ConvNet on Fashion-MNIST
#
# **What you will learn**
#
# - the data: Fashion-MNIST images, how minips loads and normalises them, and how a
#   `BatchLoader` with a `DistributedSampler` cuts an epoch into minibatches;
# - the training loop, written by hand: forward, loss, zero the gradients, backward,
#   optimizer step; and evaluation (`no_grad`, `eval()` mode);
# - SGD with momentum, the update every distributed algorithm of steps 5-8 ends with;
# - the `Trainer` (`minips/train.py`) that runs the same loop for you, and what it writes:
#   `metrics.csv`, `summary.json`, `trace.csv`.
#
# **Runs in**: one process, about 35 s on idle cores (the ConvNet epochs dominate).
# **Files to read alongside**: `minips/data/datasets.py`, `minips/data/loader.py`,
# `minips/data/sampler.py`, `minips/optim.py`, `minips/models/`, `minips/train.py`
# (`Trainer.run` and `Trainer._train_step`; the options are in `minips/config.py`, the
# files it writes in `minips/rundir.py`).

# %%
import csv

import matplotlib.pyplot as plt
import numpy as np

import minips as mp
from _common import exercise, out_dir, pick, show
from minips.data import BatchLoader, load_image_dataset
from minips.models import MLP
from minips.optim import SGD
from minips.train import Trainer, TrainConfig

OUT = out_dir("03")

# %% [markdown]
# ## 1. The data
#
# Fashion-MNIST (Xiao, Rasul & Vollgraf 2017) has 70,000 grey 28x28 images of 10 kinds of
# garment. The repository ships a stratified subset, `data/fashion-mnist-mini.h5`: 10,000
# training and 2,000 test images, so everything runs on a laptop with no download.
# `load_image_dataset` scales pixels to [0, 1] and standardises them with the training
# mean and standard deviation, and returns float32 arrays in NCHW layout.

# %%
ds = load_image_dataset("fashion-mnist-mini")
print("train:", ds.train_x.shape, ds.train_x.dtype, "| test:", ds.test_x.shape, "| from", ds.path)
print("pixel mean/std after normalisation: %.3f / %.3f" % (ds.train_x.mean(), ds.train_x.std()))
print("classes:", ds.class_names)

fig, axes = plt.subplots(2, 8, figsize=(10, 3))
for ax, i in zip(axes.flat, range(16)):
    ax.imshow(ds.train_x[i, 0], cmap="gray_r")
    ax.set_title(ds.class_names[ds.train_y[i]], fontsize=8)
    ax.axis("off")
show(fig, OUT / "samples.png")

# %% [markdown]
# A `BatchLoader` yields `(x, y)` minibatches in the order of a `DistributedSampler`: one
# seeded permutation per epoch. With one process (`rank 0 of 1`) that is just a shuffled
# pass over the data; in step 5 the same sampler gives each MPI rank its share. `drop_last`
# drops the final short batch so every step has the same size.

# %%
loader = BatchLoader(ds.train_x, ds.train_y, batch_size=64, seed=0)
print(len(loader), "batches of 64 per epoch; first labels of epoch 0:", next(iter(loader))[1][:8])
loader.set_epoch(1)
print("                          first labels of epoch 1:", next(iter(loader))[1][:8])

# %% [markdown]
# ## 2. The training loop, by hand
#
# A model in minips has a `loss(batch)` method (`minips/models/classifier.py::Classifier.loss`: the
# softmax cross-entropy of `model(x)` against the labels). One step of SGD:
#
# 1. `loss = model.loss(batch)`: the forward pass records the graph;
# 2. `model.zero_grad()`: gradients *accumulate* (step 1), so clear last step's;
# 3. `loss.backward()`: fills every `p.grad`;
# 4. `opt.step()`: `SGD.step` updates every `p.data` from `p.grad`.
#
# We train the small MLP (784 -> 256 -> 10) for one epoch: it takes seconds.

# %%
mp.random.seed(0)  # the one generator for initial weights and dropout (minips/random.py)
mlp = MLP(784, (256,), 10)
opt = SGD(mlp.parameters(), lr=0.05, momentum=0.9)
mlp_losses = []
loader.set_epoch(0)
for step, batch in enumerate(loader):
    loss = mlp.loss(batch)
    mlp.zero_grad()
    loss.backward()
    opt.step()
    mlp_losses.append(loss.item())
    if step % 40 == 0:
        print(f"step {step:3d}  loss {loss.item():.3f}")
    if step + 1 >= pick(10_000, 20):
        break


# %% [markdown]
# ## Exercise 3.1: evaluate
#
# Write `accuracy(model, x, y, batch_size)`: the fraction of images whose largest logit is
# the right class. Two things matter:
#
# - run the model under `with mp.no_grad():` (no graph, less memory);
# - switch it to evaluation mode with `model.eval()` (turns Dropout off; the ConvNet has
#   one) and back to training mode with `model.train()` at the end.
#
# `model(mp.Tensor(xb))` returns the logits as a Tensor; `.data` is the array.

# %%
def accuracy(model, x, y, batch_size=500):
    # YOUR CODE HERE
    raise NotImplementedError


# %%
accuracy = exercise("3.1", accuracy)
print(f"MLP after one epoch: test accuracy {accuracy(mlp, ds.test_x, ds.test_y):.3f}")


# %% [markdown]
# ## Exercise 3.2: SGD with momentum
#
# `SGD.step` calls `SGD.apply(i, w, d)` for each parameter, with `d` its gradient. In the
# distributed steps, `d` will be an *averaged* gradient (step 5), or a *stale* or
# *predicted* one (steps 7-8); the update itself never changes. Read `minips/optim.py` and
# write it for momentum `mu` without weight decay or Nesterov: return the new weights and
# the new momentum buffer `v` as new arrays, leaving `w`, `d` and `v` as they are (`v` is
# `None` before the first step; note what `SGD` does then: `d` is the gradient buffer, which
# the next backward overwrites).

# %%
def sgd_momentum(w, d, v, lr, mu):
    """Return (new w, new v)."""
    # YOUR CODE HERE
    raise NotImplementedError


# %%
sgd_momentum = exercise("3.2", sgd_momentum)

# %% [markdown]
# ## 3. The ConvNet, with the Trainer
#
# `Trainer` (`minips/train.py`) runs the loop above for any model, data set and distributed
# algorithm, evaluates after every epoch, times every phase of every step, and writes its
# outputs. `TrainConfig`'s fields are the command-line flags: this cell is the same as
#
# ```
# python -m minips train --model convnet --algo sync --epochs 2 --out runs/tutorials/03/convnet
# ```
#
# (The Trainer's default algorithm is `pseudo-sync`, the subject of step 7; on one process
# we ask for `sync`, which there is plain SGD.) We also ask for batch 64 like our loop
# above; the other options keep their defaults, printed below (`schedule="cosine"` decays
# the learning rate to 0 over the planned steps; `nesterov=True` is Nesterov's variant of
# momentum, `SGD.apply` in `minips/optim.py`).

# %%
cfg = TrainConfig(model="convnet", data="fashion-mnist-mini", algo="sync", epochs=2, batch_size=64,
                  max_steps=pick(0, 12), out=str(OUT / "convnet"), seed=0,
                  overwrite=True)  # rerunning this step replaces its run
print({k: getattr(cfg, k) for k in ("batch_size", "lr", "momentum", "nesterov", "weight_decay", "schedule")})
trainer = Trainer(cfg)
summary = trainer.run()

# %% [markdown]
# The table above is the **timing breakdown** of a step: forward, backward, and the phases
# of the distributed algorithm (post, wait, predict, update). On one process there is no
# communication, so forward + backward is nearly everything; the backward pass costs about
# twice the forward (it computes two gradients per layer, one for the weights and one for
# the input). From step 5 on, `wait` will appear.
#
# The run directory holds `metrics.csv` (one row per epoch), `summary.json` (the final
# numbers, e.g. `test_accuracy`, `time_breakdown`; its `units` table says what each one
# measures: `images_per_s` is the training step's throughput, `wall_images_per_s` the whole
# run's, evaluations and compile time included) and `trace.csv` (one row per step; the
# phase columns end in `_s`, seconds, and `warmup = 1` marks the first steps, which include
# Numba's compile time). Let us plot the per-step training loss of both models.

# %%
with open(OUT / "convnet" / "trace.csv") as f:
    trace = list(csv.DictReader(f))
cnn_losses = [float(r["loss"]) for r in trace]
print("ConvNet: test accuracy %.3f after %d steps, %.0f images/s" %
      (summary["test_accuracy"], summary["steps"], summary["images_per_s"]))


def smooth(v, n=10):
    v = np.asarray(v)
    return np.convolve(v, np.ones(n) / n, mode="valid") if len(v) > n else v


fig, ax = plt.subplots(figsize=(7, 4))
ax.plot(smooth(mlp_losses), label="MLP, our loop")
ax.plot(smooth(cnn_losses), label="ConvNet, Trainer (lr decays)")
steps_per_epoch = len(loader)
if len(cnn_losses) > steps_per_epoch:
    ax.axvline(steps_per_epoch, color="gray", ls=":", label="end of epoch 1")
ax.set_xlabel("step (batch of 64)")
ax.set_ylabel("training loss (10-step mean)")
ax.set_title("training loss on fashion-mnist-mini")
ax.legend()
show(fig, OUT / "loss_curves.png")

# %% [markdown]
# Which images does the ConvNet get wrong? The trained model is `trainer.model`; your
# `accuracy` from exercise 3.1 measures it on the test set, and a few of its mistakes show
# which garments look alike at 28x28.

# %%
cnn = trainer.model
print(f"ConvNet test accuracy (your function): {accuracy(cnn, ds.test_x, ds.test_y):.3f}")
cnn.eval()
with mp.no_grad():
    pred = cnn(mp.Tensor(ds.test_x[:500])).data.argmax(axis=1)
cnn.train()
wrong = np.flatnonzero(pred != ds.test_y[:500])[:12]
fig, axes = plt.subplots(2, 6, figsize=(10, 4.6), gridspec_kw={"hspace": 0.6})  # room for two-line titles
for ax, i in zip(axes.flat, wrong):
    ax.imshow(ds.test_x[i, 0], cmap="gray_r")
    ax.set_title(f"{ds.class_names[pred[i]]}\n(is {ds.class_names[ds.test_y[i]]})", fontsize=7)
for ax in axes.flat:
    ax.axis("off")
fig.suptitle("ConvNet mistakes: predicted (true)")
show(fig, OUT / "mistakes.png")

# %% [markdown]
# ## What you saw
#
# - A training step is: forward, zero the gradients, backward, update. `Trainer` adds
#   evaluation, timing, checkpoints and outputs around exactly that.
# - SGD with momentum keeps a buffer `v`; the distributed algorithms feed it an averaged,
#   stale or predicted gradient instead of the local one.
# - The ConvNet learns faster per step than the MLP and reaches a higher accuracy, at a
#   higher cost per step.
#
# **Next**: step 4 leaves the single process: MPI ranks, Allreduce, and nonblocking
# requests.
