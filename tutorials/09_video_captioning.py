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
# # Step 9: Video captioning with an LSTM, distributed
#
# **What you will learn**
#
# - the second workload of the seed paper, on data a laptop generates in seconds: short
#   clips of Fashion-MNIST garments moving on a canvas, each with a caption such as
#   "a sneaker moves up and a bag moves down-left";
# - an encoder-decoder model: a small CNN on every frame, an **LSTM** that reads the
#   frames, a second LSTM that writes the caption word by word (teacher forcing during
#   training, greedy decoding at test time);
# - how sequences are batched: token ids, `<bos>`/`<eos>`, padding, and a loss that
#   ignores the padding;
# - that the distributed algorithms of steps 5-8 train it unchanged: the model only has
#   to provide `loss(batch)`.
#
# **Runs with**: `mpiexec -n 2 python tutorials/09_video_captioning.py`, about 45 s on idle cores.
# (Opened as a notebook it runs on one process; its last cell runs it on 2 ranks.)
# **Files to read alongside**: `minips/data/moving_fmnist.py` (clips, captions, vocabulary),
# `minips/models/captioner.py` (the model), `minips/tasks/captioning.py` (BLEU, evaluation),
# `minips/nn/recurrent.py` (LSTM), `kernels/lstm.py`, `docs/lstm.md` (backpropagation
# through time), `docs/captioning.md`.

# %%
import time

import matplotlib.pyplot as plt
import numpy as np

import minips as mp
from _common import exercise, mpi_setup, out_dir, pick, require_ranks, run_on_ranks, say, show

from minips.data import moving_fmnist
from minips.gradcheck import gradcheck
from minips.models import VideoCaptioner
from minips.nn.recurrent import lstm
from minips.train import Trainer, TrainConfig

comm = mpi_setup()
require_ranks(comm, 2, "09_video_captioning.py")
OUT = out_dir("09")
VOCAB = moving_fmnist.VOCAB

# %% [markdown]
# ## 1. The data: moving Fashion-MNIST, with captions
#
# A clip is 10 frames of a 48x48 canvas on which 1 or 2 garments move, each in one of 8
# directions, bouncing off the border (the construction of Moving MNIST, Srivastava et al.
# 2015). The caption names the garments from left to right (as they stand in the first
# frame) and the direction each one starts in. The set is generated deterministically
# from a seed: 20,000 training clips from the training garments of
# `data/fashion-mnist-mini.h5`, 500 test clips from its test garments. A clip is stored as a
# tiny table (which garment, where, which velocity) and drawn into pixels only when a batch
# is taken (`ClipSet`), so the set takes about a megabyte; it is cached in `data/cache/`.

# %%
t0 = time.perf_counter()
ds = moving_fmnist.load_dataset()
say(f"{len(ds.train_clips)} training and {len(ds.test_clips)} test clips of shape {ds.train_clips.shape[1:]} "
    f"({time.perf_counter() - t0:.1f} s)")
for i in range(3):
    say(f"  clip {i}: {ds.train_text[i]!r}")

if comm.rank == 0:
    fig, axes = plt.subplots(3, 10, figsize=(12, 4))
    for row in range(3):
        clip = ds.train_clips[row]                     # (T, 1, 48, 48) uint8, rendered now
        for t in range(10):
            axes[row, t].imshow(clip[t, 0], cmap="gray_r", vmin=0, vmax=255)
            axes[row, t].axis("off")
        axes[row, 0].set_title(ds.train_text[row], fontsize=8, loc="left")
    fig.suptitle("three training clips, frames left to right")
    show(fig, OUT / "clips.png")

# %% [markdown]
# ### Captions as token ids
#
# The grammar has 21 words; with four special tokens the vocabulary (`moving_fmnist.VOCAB`)
# has 25: `<pad>` = 0, `<bos>` = 1 (begin), `<eos>` = 2 (end), `<unk>` = 3, then the words.
# A caption is stored as `<bos> w1 ... wk <eos>` followed by `<pad>` up to a fixed length
# (11), so that a batch of captions is one integer array (N, 11).

# %%
say("vocabulary:", VOCAB.words)
say("ids of clip 0's caption:", ds.train_ids[0], "->", repr(VOCAB.decode(ds.train_ids[0])))


# %% [markdown]
# ## Exercise 9.1: encode a caption
#
# Write `encode_caption(text, length)`: the int64 array `<bos>`, the id of each word
# (`VOCAB.index[word]`; a word not in the vocabulary becomes `<unk>`), `<eos>`, then
# `<pad>` up to `length`. The special ids are `VOCAB.BOS`, `VOCAB.EOS`, `VOCAB.PAD`,
# `VOCAB.UNK`; words are separated by spaces.

# %%
def encode_caption(text, length):
    # YOUR CODE HERE
    raise NotImplementedError


# %%
encode_caption = exercise("9.1", encode_caption)

# %% [markdown]
# ## 2. The LSTM
#
# One LSTM layer reads a sequence `x` of shape (T, N, F) (time first) and keeps a state
# `(h, c)`, each (N, H). Per step, with the four gates as four H-wide blocks of one matrix:
#
# ```
# z_t = x_t W_ih^T + h_{t-1} W_hh^T + b          gates i, f, g, o
# c_t = sigmoid(f) * c_{t-1} + sigmoid(i) * tanh(g)
# h_t = sigmoid(o) * tanh(c_t)
# ```
#
# In minips the whole sequence is **one** autograd node (`LSTMFunction` in
# `minips/nn/recurrent.py`): its forward runs the time loop (one big matrix product for the
# input part of all steps, then one small product per step for the recurrence, and a Numba
# kernel for the elementwise work), and its backward is backpropagation through time
# (`kernels/lstm.py::lstm_backward`; the derivation is in `docs/lstm.md`). Like every op,
# it passes `gradcheck` in float64:

# %%
rng = np.random.default_rng(0)
T_, N_, F_, H_ = 4, 2, 3, 5
args = [rng.standard_normal(s) * 0.5 for s in ((T_, N_, F_), (4 * H_, F_), (4 * H_, H_), (4 * H_,))]
report = gradcheck(lambda x, w_ih, w_hh, b: lstm(x, w_ih, w_hh, b)[0], args)
say("LSTM gradcheck (T=4, N=2, F=3, H=5), worst element:", report)

# %% [markdown]
# ## 3. The model
#
# `VideoCaptioner` (`minips/models/captioner.py`; the sequence-to-sequence design of Sutskever et
# al. 2014, for video Venugopalan et al. 2015):
#
# ```
# frames (N, T, 1, 48, 48) --CNN on every frame--> (T, N, 128) --LSTM encoder--> state (h, c)
# caption ids [<bos> w1 .. wk] --Embedding--> --LSTM decoder, starting from (h, c)--> --Linear--> logits (L, N, 25)
# ```
#
# **Teacher forcing**: during training the decoder reads the *true* previous word and
# learns to predict the next one, so all positions are trained in one pass. At test time
# there is no true previous word: `greedy_decode` starts from `<bos>` and feeds back its
# own most likely word until `<eos>`.

# %%
mp.random.seed(0)
model = VideoCaptioner(len(VOCAB))
say(model)
parts = {name: sum(p.size for p in getattr(model, name).parameters()) for name in ("cnn", "encoder", "embed",
                                                                                     "decoder", "out")}
total = model.num_parameters()
say("parameters:", ", ".join(f"{k} {v:,}" for k, v in parts.items()), f"= {total:,} "
    f"({4 * total / 2**20:.1f} MiB of gradient per step to allreduce)")

# %% [markdown]
# Compared with the ConvNet (422k parameters), this model has twice the gradient to average
# per step, and most of it is in the two LSTMs' weight matrices. Those weights are used at
# *every* time step, so their gradients are complete only when the whole backward through
# time is done: there is little for overlap-sync to hide behind, while pseudo-sync overlaps
# the allreduce with the *next* step regardless.
#
# ### The loss ignores padding
#
# The decoder predicts tokens 1..10 of each caption from tokens 0..9. Short captions end in
# `<pad>`, and a pad position must not count: the loss is the cross-entropy summed over
# the *real* target tokens (words and `<eos>`), divided by their number
# (`minips.nn.sequence_cross_entropy`, used by `VideoCaptioner.loss`).


# %% [markdown]
# ## Exercise 9.2: the masked cross-entropy
#
# Write `masked_cross_entropy(logits, targets, pad_id)` in NumPy: `logits` float (L, N, V),
# `targets` int (L, N). Return the mean over the positions where `targets != pad_id` of
# `-log softmax(logits)[target]` (compute the log-softmax stably: subtract the maximum
# over V first, into a new array: `logits` is the model's output and stays as it is). The
# check compares it with `nn.sequence_cross_entropy`.

# %%
def masked_cross_entropy(logits, targets, pad_id):
    # YOUR CODE HERE
    raise NotImplementedError


# %%
masked_cross_entropy = exercise("9.2", masked_cross_entropy)
x_b, y_b = ds.train_clips[:8], ds.train_ids[:8]
logits = model(x_b, y_b)
say(f"untrained model: loss {model.loss((x_b, y_b)).item():.3f} nats per token "
    f"(your function: {masked_cross_entropy(logits.data, y_b[:, 1:].T, VOCAB.PAD):.3f}; "
    f"ln 25 = {np.log(25):.3f} would be a uniform guess)")

# %% [markdown]
# ## 4. Training it on 2 ranks
#
# The Trainer drives the captioner exactly like the ConvNet: the task
# (`minips.tasks.captioning.CaptioningTask`) provides the batches (clips and token ids) and the
# evaluation; the algorithms only see `model.loss(batch)` and the gradients. We train with
# `sync` and with `pseudo-sync` (adaptive predictor, k = 1), batch 32 per rank, on
# emulated 1 GbE, for part of an epoch each. The same as
#
# ```
# mpiexec -n 2 python -m minips train --model captioner --data moving-fmnist-captions --algo pseudo-sync --network 1gbe ...
# ```
#
# (`TrainConfig(predictor="adaptive")` below is an older flag kept as an alias: it fills
# the `predictor` option of algorithms that have one, so `pseudo-sync` runs as
# `pseudo-sync:predictor=adaptive`, and `sync`, which has no predictor, ignores it.)
#
# Evaluation reports four numbers on the 500 test clips: `test_loss` and
# `token_accuracy` under teacher forcing, and, for greedy-decoded captions, **BLEU**
# (corpus BLEU-4 by sacrebleu, 0-100: how many 1- to 4-word sequences the captions share
# with the reference) and `exact_match` (the whole caption right).

# %%
steps = pick(150, 6)
runs = {}
for algo in ("sync", "pseudo-sync"):
    cfg = TrainConfig(model="captioner", data="moving-fmnist-captions", algo=algo, predictor="adaptive",
                      epochs=1, max_steps=steps, batch_size=32, network="1gbe", quiet=True,
                      out=str(OUT / algo), overwrite=True)
    trainer = Trainer(cfg)
    s = trainer.run()
    runs[algo] = (s, trainer)
    b = s["time_breakdown"]
    say(f"{s['label']:22s} BLEU {s['bleu']:5.1f}  exact match {s['exact_match']:.3f}  token accuracy "
        f"{s['token_accuracy']:.3f}   step {1e3 * s['step_time_s']:6.1f} ms (compute "
        f"{1e3 * (b['forward'] + b['backward']):6.1f}, wait {1e3 * b['wait']:5.1f}, predict {1e3 * b['predict']:5.1f})")

# %%
if comm.rank == 0:
    import csv

    fig, ax = plt.subplots(figsize=(7, 4))
    for algo in runs:
        with open(OUT / algo / "trace.csv") as f:
            loss = [float(r["loss"]) for r in csv.DictReader(f)]
        n = min(10, len(loss))
        ax.plot(np.convolve(loss, np.ones(n) / n, mode="valid"), label=runs[algo][0]["label"])
    ax.set_xlabel("step (global batch 64)")
    ax.set_ylabel("training loss per token (10-step mean)")
    ax.set_title("video captioning, 2 ranks, EMULATED 1 GbE")
    ax.legend()
    show(fig, OUT / "loss.png")

# %% [markdown]
# ## 5. What does it say?
#
# Greedy captions of a few test clips by the pseudo-sync model (every rank holds the same
# weights; rank 0 prints):

# %%
captioner = runs["pseudo-sync"][1].model
ids = captioner.greedy_decode(ds.test_clips[:8])
for i in range(8):
    hyp, ref = VOCAB.decode(ids[i]), ds.test_text[i]
    say(f"{'OK ' if hyp == ref else '   '} predicted: {hyp!r}\n      reference: {ref!r}")

# %% [markdown]
# After part of an epoch the model usually has the grammar right and some of the nouns and
# directions; telling a shirt from a pullover at 28x28, moving, is hard. Longer training
# (`--epochs 3` and more, on more ranks) improves BLEU steadily; `docs/captioning.md`
# describes the data and metrics in full.
#
# ## What you saw
#
# - A captioning model is a CNN per frame, an LSTM encoder and an LSTM decoder; minips'
#   LSTM is one autograd node whose backward is BPTT, checked by `gradcheck`.
# - Sequences are batched with `<bos>`, `<eos>` and padding; the loss and the metrics
#   ignore the padding.
# - The distributed algorithms train it unchanged: they only need `loss(batch)`. Its
#   gradient is larger than the ConvNet's, so communication matters more.
#
# **Next**: step 10 measures the network and projects all this to a cluster.


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
