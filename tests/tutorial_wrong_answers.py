"""Plausible wrong answers to the tutorials' exercises: each check must reject them.

Among them, for the kinds of unfair verdict looked for in every check (issue
45): answers that write into the caller's arrays (right values otherwise),
answers that keep an argument the caller reuses, and answers that leave their
own work undone (a missing wait, a missing ``no_grad``) hoping the check does it.

``WRONG[exercise_id]()`` returns a list of wrong answers (built lazily, so this
module imports nothing heavy).
"""
from __future__ import annotations

import numpy as np


def _w11():
    import minips as mp

    class ForgotChainRule(mp.Function):      # returns sigmoid(a), not g * sigmoid(a)
        def forward(self, a):
            self.a = a
            return np.logaddexp(0.0, a)

        def backward(self, g):
            return 1 / (1 + np.exp(-self.a)) + 0 * g

    class Derivative(mp.Function):          # d/da of log(1+e^a) mistaken for 1/(1+e^a)
        def forward(self, a):
            self.a = a
            return np.logaddexp(0.0, a)

        def backward(self, g):
            return g / (1 + np.exp(self.a))

    class OffByOne(mp.Function):            # log(2 + e^a): a right backward, a forward 1 off inside
        def forward(self, a):
            self.a = a
            return np.logaddexp(0.0, a) + 1.0

        def backward(self, g):
            return g / (1 + np.exp(-self.a))

    class Overflows(mp.Function):           # the textbook e^a / (1 + e^a): inf / inf = nan for large a
        def forward(self, a):
            self.a = a
            return np.logaddexp(0.0, a)

        def backward(self, g):
            return g * np.exp(self.a) / (1 + np.exp(self.a))

    class ScalesGInPlace(mp.Function):      # right values, but g *= ...: writes into autograd's array
        def forward(self, a):
            self.a = a
            return np.logaddexp(0.0, a)

        def backward(self, g):
            e = np.exp(-np.abs(self.a))
            g *= np.where(self.a >= 0, 1 / (1 + e), e / (1 + e))
            return g

    class ClipsTheInput(mp.Function):       # right values, but clips self.a in place: the caller's tensor changes
        def forward(self, a):
            self.a = a
            return np.logaddexp(0.0, a)

        def backward(self, g):
            np.clip(self.a, -700.0, 700.0, out=self.a)
            return g / (1 + np.exp(-self.a))

    return [ForgotChainRule, Derivative, OffByOne, Overflows, ScalesGInPlace, ClipsTheInput]


def _w12():
    def in_place(x0):                          # right values, but written into the caller's x0
        x0 *= 2
        x0 += 3
        return x0
    return [lambda x0: 2 * np.asarray(x0), lambda x0: np.full_like(np.asarray(x0), 3.0),
            lambda x0: 2 * np.asarray(x0) * 3,
            lambda x0: [2 * v + 3 for v in x0],          # right values in a list, not a NumPy array
            in_place]


def _w21():
    from minips.kernels import conv as kconv

    def no_transpose(x, w, b, stride, padding):      # wrong axis order
        g = kconv.geometry(x.shape, w.shape, stride, padding)
        y2 = w.reshape(g.K, -1) @ kconv.im2col(x, g)
        return y2.reshape(g.N, g.K, g.P, g.Q) + b[None, :, None, None]

    def no_bias(x, w, b, stride, padding):
        g = kconv.geometry(x.shape, w.shape, stride, padding)
        y2 = w.reshape(g.K, -1) @ kconv.im2col(x, g)
        return y2.reshape(g.K, g.N, g.P, g.Q).transpose(1, 0, 2, 3)

    def reshapes_w_in_place(x, w, b, stride, padding):   # right values, but w.shape = ... reshapes the caller's w
        g = kconv.geometry(x.shape, w.shape, stride, padding)
        w.shape = (g.K, -1)
        y2 = w @ kconv.im2col(x, g)
        return y2.reshape(g.K, g.N, g.P, g.Q).transpose(1, 0, 2, 3) + b[None, :, None, None]
    return [no_transpose, no_bias, reshapes_w_in_place]


def _w22():
    def no_biases(c_in, size, classes, widths, hidden):
        H, W = size
        c1, c2 = widths
        return c1 * c_in * 9 + c2 * c1 * 9 + c2 * (H // 4) * (W // 4) * hidden + hidden * classes

    def no_pooling(c_in, size, classes, widths, hidden):
        H, W = size
        c1, c2 = widths
        return c1 * c_in * 9 + c1 + c2 * c1 * 9 + c2 + c2 * H * W * hidden + hidden + hidden * classes + classes
    return [no_biases, no_pooling]


def _w31():
    import minips as mp

    def no_eval(model, x, y, batch_size=500):          # Dropout still active
        with mp.no_grad():
            return float(np.mean([int(model(mp.Tensor(x[i:i + 1])).data.argmax() == y[i]) for i in range(len(x))]))

    def stays_in_eval(model, x, y, batch_size=500):
        model.eval()
        with mp.no_grad():
            return float((model(mp.Tensor(x)).data.argmax(1) == y).mean())

    def drops_last_batch(model, x, y, batch_size=500):
        model.eval()
        correct = n = 0
        with mp.no_grad():
            for i in range(0, len(x) - batch_size + 1, batch_size):
                correct += int((model(mp.Tensor(x[i:i + batch_size])).data.argmax(1) == y[i:i + batch_size]).sum())
                n += batch_size
        model.train()
        return correct / n

    def without_no_grad(model, x, y, batch_size=500):  # right value, but every forward records a graph
        model.eval()
        correct = 0
        for i in range(0, len(x), batch_size):
            correct += int((model(mp.Tensor(x[i:i + batch_size])).data.argmax(1) == y[i:i + batch_size]).sum())
        model.train()
        return correct / len(x)

    def flattens_x_in_place(model, x, y, batch_size=500):   # right value, but x.shape = ... changes the caller's x
        model.eval()
        x.shape = (len(x), -1)
        with mp.no_grad():
            hits = [model(mp.Tensor(x[i:i + batch_size])).data.argmax(1) == y[i:i + batch_size]
                    for i in range(0, len(x), batch_size)]
        model.train()
        return float(np.concatenate(hits).mean())
    return [no_eval, stays_in_eval, drops_last_batch, without_no_grad, flattens_x_in_place]


def _w32():
    def no_momentum(w, d, v, lr, mu):
        return w - lr * d, d

    def scaled_by_mu(w, d, v, lr, mu):          # w - lr*mu*v instead of w - lr*v
        v = d.copy() if v is None else mu * v + d
        return w - lr * mu * v, v

    def nesterov(w, d, v, lr, mu):
        v = d.copy() if v is None else mu * v + d
        return w - lr * (d + mu * v), v

    def updates_w_in_place(w, d, v, lr, mu):    # right values, but w -= ... writes into the caller's w
        v = d.copy() if v is None else mu * v + d
        w -= lr * v
        return w, v

    def updates_v_in_place(w, d, v, lr, mu):    # right values, but v *= mu; v += d changes the caller's v
        if v is None:
            v = d.copy()
        else:
            v *= mu
            v += d
        return w - lr * v, v

    def keeps_d_as_v(w, d, v, lr, mu):          # right values now, but v IS the gradient buffer after step 1
        v = d if v is None else mu * v + d
        return w - lr * v, v
    return [no_momentum, scaled_by_mu, nesterov, updates_w_in_place, updates_v_in_place, keeps_d_as_v]


def _w41():
    def the_sum(comm, x):
        out = x.copy()
        comm.allreduce(out)
        return out

    def in_place(comm, x):
        comm.allreduce(x)
        x /= comm.size
        return x

    def two_ranks(comm, x):                 # right on the 2 ranks the tests launch, wrong elsewhere
        out = x.copy()
        comm.allreduce(out)
        return out / 2

    def float64_mean(comm, x):              # right values, but float64: the step's gradients are float32
        out = x.copy()
        comm.allreduce(out)
        return out.astype(np.float64) / comm.size

    def rank0_divides(comm, x):             # only rank 0 divides before the sum: right on one rank only
        y = x / comm.size if comm.rank == 0 else x.copy()
        comm.allreduce(y)
        return y

    def never_waits(comm, x):               # reads the buffer before the nonblocking allreduce completed
        y = x.copy()
        comm.iallreduce(y)
        return y / comm.size
    return [the_sum, in_place, two_ranks, float64_mean, rank0_divides, never_waits]


def _w42():
    def blocking(comm, buf, chunks):
        comm.allreduce(buf)
        for c in chunks:
            c()
        return comm.iallreduce(buf[:0].copy())  # a dummy request

    def work_first(comm, buf, chunks):
        for c in chunks:
            c()
        req = comm.iallreduce(buf)
        req.wait()
        return req

    def no_progress(comm, buf, chunks):
        req = comm.iallreduce(buf)
        for c in chunks:
            c()
        req.wait()
        return req

    def never_waits(comm, buf, chunks):     # posts and drives progress, but returns without completing the request
        req = comm.iallreduce(buf)
        for c in chunks:
            c()
            comm.progress()
        return req
    return [blocking, work_first, no_progress, never_waits]


def _w51():
    def no_mean(comm, grad, weights, optimizer):
        comm.allreduce(grad)
        optimizer.apply(0, weights, grad)

    def local_only(comm, grad, weights, optimizer):
        optimizer.apply(0, weights, grad)

    def two_ranks(comm, grad, weights, optimizer):   # right on 2 ranks only
        comm.allreduce(grad)
        grad *= np.float32(0.5)
        optimizer.apply(0, weights, grad)

    def twice(comm, grad, weights, optimizer):       # divides before AND after the sum
        grad /= comm.size
        comm.allreduce(grad)
        grad /= comm.size
        optimizer.apply(0, weights, grad)

    def mean_outside(comm, grad, weights, optimizer):   # right update, but grad is left holding the SUM
        comm.allreduce(grad)
        optimizer.apply(0, weights, grad / np.float32(comm.size))

    def gathered_copy(comm, grad, weights, optimizer):  # right update, but grad keeps this rank's own gradient
        optimizer.apply(0, weights, np.mean(np.stack(comm.allgather(grad)), axis=0).astype(np.float32))
    return [no_mean, local_only, two_ranks, twice, mean_outside, gathered_copy]


def _w52():
    def no_factor_two(nbytes, P, alpha, beta):
        return (P - 1) * alpha + (P - 1) / P * nbytes * beta if P > 1 else 0.0

    def naive(nbytes, P, alpha, beta):          # a tree/gather view: P full messages
        return P * (alpha + nbytes * beta) if P > 1 else 0.0
    return [no_factor_two, naive]


def _w61():
    def forward_order(sizes, bucket_mb):
        limit = float("inf") if not bucket_mb else bucket_mb * 2**20
        buckets, cur, nb = [], [], 0
        for i in range(len(sizes)):
            cur.append(i)
            nb += 4 * sizes[i]
            if nb >= limit:
                buckets.append(cur)
                cur, nb = [], 0
        return buckets + ([cur] if cur else [])

    def elements_not_bytes(sizes, bucket_mb):
        limit = float("inf") if not bucket_mb else bucket_mb * 2**20
        buckets, cur, n = [], [], 0
        for i in reversed(range(len(sizes))):
            cur.append(i)
            n += sizes[i]
            if n >= limit:
                buckets.append(cur)
                cur, n = [], 0
        return buckets + ([cur] if cur else [])

    def closes_past_the_limit(sizes, bucket_mb):   # > instead of >=: a bucket that reaches it exactly stays open
        limit = float("inf") if not bucket_mb else bucket_mb * 2**20
        buckets, cur, nb = [], [], 0
        for i in reversed(range(len(sizes))):
            cur.append(i)
            nb += 4 * sizes[i]
            if nb > limit:
                buckets.append(cur)
                cur, nb = [], 0
        return buckets + ([cur] if cur else [])
    def reverses_in_place(sizes, bucket_mb):    # right buckets, but sizes.reverse() reorders the caller's list
        limit = float("inf") if not bucket_mb else bucket_mb * 2**20
        sizes.reverse()
        n, buckets, cur, nb = len(sizes), [], [], 0
        for j, size in enumerate(sizes):
            cur.append(n - 1 - j)
            nb += 4 * size
            if nb >= limit:
                buckets.append(cur)
                cur, nb = [], 0
        return buckets + ([cur] if cur else [])
    return [forward_order, elements_not_bytes, closes_past_the_limit, reverses_in_place]


def _w62():
    def registration_reversed(model, batch):
        return [n for n, _ in reversed(list(model.named_parameters()))]

    def keeps_hooks(model, batch):
        order = []
        for n, p in model.named_parameters():
            p.register_grad_hook(lambda t, n=n: order.append(n))
        model.loss(batch).backward()
        return order
    return [registration_reversed, keeps_hooks]


def _w71():
    from collections import deque

    def fresh(grad_fn, w0, k, lr, momentum, steps):          # ignores the staleness
        w, v = np.array(w0, np.float32), None
        for t in range(steps):
            g = grad_fn(w, t)
            v = g.copy() if v is None else momentum * v + g
            w = w - lr * v
        return w

    def off_by_one(grad_fn, w0, k, lr, momentum, steps):     # applies g_{t-k+1}
        w, v, q = np.array(w0, np.float32), None, deque()
        for t in range(steps):
            q.append(grad_fn(w, t))
            if len(q) >= k:
                g = q.popleft()
                v = g.copy() if v is None else momentum * v + g
                w = w - lr * v
        return w

    def no_momentum(grad_fn, w0, k, lr, momentum, steps):
        w, q = np.array(w0, np.float32), deque()
        for t in range(steps):
            q.append(grad_fn(w, t))
            if len(q) > k:
                w = w - lr * q.popleft()
        return w
    def no_copy(grad_fn, w0, k, lr, momentum, steps):         # right weights, but w -= ... writes into w0
        w, v, q = np.asarray(w0), None, deque()
        for t in range(steps):
            q.append(grad_fn(w, t))
            if len(q) > k:
                g = q.popleft()
                v = g.copy() if v is None else momentum * v + g
                w -= lr * v
        return w
    return [fresh, off_by_one, no_momentum, no_copy]


def _w72():
    return [lambda tc, tm, algo: tc + tm,
            lambda tc, tm, algo: tc + tm if algo == "sync" else tc,
            lambda tc, tm, algo: max(tc, tm) if algo == "sync" else min(tc, tm)]


def _w81():
    from minips.distributed.algorithms.predictors import Predictor

    class Swapped(Predictor):                 # alpha on the old value
        def __init__(self, staleness=1, alpha=0.5):
            super().__init__(staleness)
            self.alpha, self.S = alpha, None

        def forecast(self, G, w_now, w_then):
            self.S = G.copy() if self.S is None else (1 - self.alpha) * G + self.alpha * self.S
            return self.S.astype(np.float32)

    class Aliased(Predictor):                 # returns its state and updates it in place
        def __init__(self, staleness=1, alpha=0.5):
            super().__init__(staleness)
            self.alpha, self.S = alpha, None

        def forecast(self, G, w_now, w_then):
            if self.S is None:
                self.S = G.astype(np.float32)
            else:
                self.S *= (1 - self.alpha)
                self.S += self.alpha * G
            return self.S

    class Float64(Predictor):                  # right values, but float64 (the optimizer's buffers are float32)
        def __init__(self, staleness=1, alpha=0.5):
            super().__init__(staleness)
            self.alpha, self.S = alpha, None

        def forecast(self, G, w_now, w_then):
            G = G.astype(np.float64)
            self.S = G if self.S is None else self.alpha * G + (1 - self.alpha) * self.S
            return self.S.copy()

    class KeepsGThenUpdatesInPlace(Predictor):   # issue 45's: S = G, then S *= ..., S += ...: changes the caller's G
        def __init__(self, staleness=1, alpha=0.5):
            super().__init__(staleness)
            self.alpha, self.S = alpha, None

        def forecast(self, G, w_now, w_then):
            if self.S is None:
                self.S = G
            else:
                self.S *= (1 - self.alpha)
                self.S += self.alpha * G
            return self.S.astype(np.float32, copy=True)

    class KeepsG(Predictor):                     # S = G (no copy), then new arrays: S changes when G's buffer is reused
        def __init__(self, staleness=1, alpha=0.5):
            super().__init__(staleness)
            self.alpha, self.S = alpha, None

        def forecast(self, G, w_now, w_then):
            self.S = G if self.S is None else self.alpha * G + (1 - self.alpha) * self.S
            return self.S.astype(np.float32, copy=True)
    return [Swapped, Aliased, Float64, KeepsGThenUpdatesInPlace, KeepsG]


def _w82():
    from minips.distributed.algorithms.predictors import Predictor

    class NoTrend(Predictor):
        def __init__(self, staleness=1, alpha=0.5, beta=0.1):
            super().__init__(staleness)
            self.alpha, self.beta, self.L, self.B = alpha, beta, None, None

        def forecast(self, G, w_now, w_then):
            self.L = G.copy() if self.L is None else self.alpha * G + (1 - self.alpha) * self.L
            return self.L.astype(np.float32)

    class OneStepAhead(Predictor):             # forecasts L + B instead of L + k*B
        def __init__(self, staleness=1, alpha=0.5, beta=0.1):
            super().__init__(staleness)
            self.alpha, self.beta, self.L, self.B = alpha, beta, None, None

        def forecast(self, G, w_now, w_then):
            if self.L is None:
                self.L, self.B = G.copy(), np.zeros_like(G)
            else:
                Lp = self.L
                self.L = self.alpha * G + (1 - self.alpha) * (Lp + self.B)
                self.B = self.beta * (self.L - Lp) + (1 - self.beta) * self.B
            return (self.L + self.B).astype(np.float32)

    class KeepsGAsLevel(Predictor):            # L = G (no copy), then L updated in place: changes the caller's G
        def __init__(self, staleness=1, alpha=0.5, beta=0.1):
            super().__init__(staleness)
            self.alpha, self.beta, self.L, self.B = alpha, beta, None, None

        def forecast(self, G, w_now, w_then):
            if self.L is None:
                self.L, self.B = G, np.zeros_like(G)
            else:
                prev = self.L.copy()
                self.L *= 1 - self.alpha
                self.L += (1 - self.alpha) * self.B + self.alpha * G
                self.B = self.beta * (self.L - prev) + (1 - self.beta) * self.B
            return (self.L + self.k * self.B).astype(np.float32)
    return [NoTrend, OneStepAhead, KeepsGAsLevel]


def _w101():
    def absolute(nbytes, seconds, P):          # unweighted least squares
        n, t = np.asarray(nbytes, float), np.asarray(seconds, float)
        A = np.stack([np.full_like(n, 2 * (P - 1)), 2 * (P - 1) / P * n], axis=1)
        (a, b), *_ = np.linalg.lstsq(A, t, rcond=None)
        return max(0.0, a), max(0.0, b)

    def no_ring_factors(nbytes, seconds, P):   # fits t = alpha + n beta
        n, t = np.asarray(nbytes, float), np.asarray(seconds, float)
        A = np.stack([np.ones_like(n), n], axis=1)
        (a, b), *_ = np.linalg.lstsq(A / t[:, None], np.ones_like(t), rcond=None)
        return max(0.0, a), max(0.0, b)
    return [absolute, no_ring_factors]


def _w102():
    from minips.distributed.costmodel import ring_allreduce_time

    def inverted(tc, n, P, a, b, algo):
        T = ring_allreduce_time(n, P, a, b)
        return (tc + T) / tc if algo == "sync" else max(tc, T) / tc

    def pseudo_is_free(tc, n, P, a, b, algo):
        T = ring_allreduce_time(n, P, a, b)
        return tc / (tc + T) if algo == "sync" else 1.0
    return [inverted, pseudo_is_free]


def _w103():
    def strictly_above(curve, t, target):      # > instead of >=: an evaluation at the target misses it
        return next((step * t for step, a in curve if a > target), None)

    def the_step(curve, t, target):            # the step, not its seconds
        return next((step for step, a in curve if a >= target), None)

    def last_crossing(curve, t, target):       # the last evaluation above, not the first
        hits = [step * t for step, a in curve if a >= target]
        return hits[-1] if hits else None

    def infinity_when_missed(curve, t, target):
        return next((step * t for step, a in curve if a >= target), float("inf"))

    def sorts_the_curve(curve, t, target):     # sorts the caller's list by accuracy
        curve.sort(key=lambda p: p[1])
        return next((step * t for step, a in curve if a >= target), None)
    return [strictly_above, the_step, last_crossing, infinity_when_missed, sorts_the_curve]


def _w91():
    from minips.data.moving_fmnist import VOCAB

    def no_bos(text, length):
        ids = [VOCAB.index.get(w, VOCAB.UNK) for w in text.split()] + [VOCAB.EOS]
        return np.array(ids + [VOCAB.PAD] * (length - len(ids)), np.int64)

    def pads_with_eos(text, length):
        ids = [VOCAB.BOS] + [VOCAB.index.get(w, VOCAB.UNK) for w in text.split()]
        return np.array(ids + [VOCAB.EOS] * (length - len(ids)), np.int64)

    def a_list(text, length):                  # right ids in a list, not the int64 array asked for
        ids = [VOCAB.BOS] + [VOCAB.index.get(w, VOCAB.UNK) for w in text.split()] + [VOCAB.EOS]
        return ids + [VOCAB.PAD] * (length - len(ids))
    return [no_bos, pads_with_eos, a_list]


def _w92():
    def counts_padding(logits, targets, pad_id):
        z = logits - logits.max(axis=-1, keepdims=True)
        log_p = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
        picked = np.take_along_axis(log_p, targets[..., None], axis=-1)[..., 0]
        return float(-(picked * (targets != pad_id)).sum() / targets.size)

    def unstable(logits, targets, pad_id):
        p = np.exp(logits) / np.exp(logits).sum(axis=-1, keepdims=True)
        picked = np.take_along_axis(np.log(p), targets[..., None], axis=-1)[..., 0]
        real = targets != pad_id
        return float(-(picked * real).sum() / real.sum())

    def shifts_logits_in_place(logits, targets, pad_id):   # right value, but logits -= ... changes the caller's
        logits -= logits.max(axis=-1, keepdims=True)       # array (in the step: the model's output)
        log_p = logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))
        picked = np.take_along_axis(log_p, targets[..., None], axis=-1)[..., 0]
        real = targets != pad_id
        return float(-(picked * real).sum() / real.sum())
    return [counts_padding, unstable, shifts_logits_in_place]


def _w111():
    def only_the_mean(W):                      # one row: forgot that every rank keeps a copy
        return np.asarray(W).mean(axis=0)

    def sums(W):                               # allreduce without the division by P
        W = np.asarray(W)
        return np.tile(W.sum(axis=0), (W.shape[0], 1))

    def two_ranks(W):                          # divides by 2: right only with 2 ranks
        W = np.asarray(W)
        return np.tile(W.sum(axis=0) / 2, (W.shape[0], 1))

    def wrong_axis(W):                         # the mean of each rank's own weights
        W = np.asarray(W)
        return np.tile(W.mean(axis=1, keepdims=True), (1, W.shape[1]))

    def in_place(W):                           # right values, but overwrites the caller's array
        W[...] = W.mean(axis=0)
        return W

    def read_only_view(W):                     # right values, a read-only view: the next cell's W[i] -= fails
        W = np.asarray(W)
        return np.broadcast_to(W.mean(axis=0), W.shape)

    def shared_rows(W):                        # right values, writable, but every row is the same memory
        W = np.asarray(W)
        m = W.mean(axis=0)
        return np.lib.stride_tricks.as_strided(m, shape=W.shape, strides=(0, m.strides[0]), writeable=True)
    return [only_the_mean, sums, two_ranks, wrong_axis, in_place, read_only_view, shared_rows]


def _w112():
    import math

    def both_double(t1, k1, n, data="iid"):    # ignores the data kind
        return [(t1 * 2**s, k1 * 2**s, 0.5**s) for s in range(n)]

    def rounds_each_stage(t1, k1, n, data="iid"):   # rounds before growing: 1 stays 1 forever
        out, k = [], k1
        for s in range(n):
            out.append((t1 * 2**s, max(1, k), 0.5**s))
            k = round(k * (2.0 if data == "iid" else math.sqrt(2.0)))
        return out

    def fixed_length(t1, k1, n, data="iid"):   # stages do not lengthen
        out, k = [], float(k1)
        for s in range(n):
            out.append((t1, max(1, round(k)), 0.5**s))
            k *= 2.0 if data == "iid" else math.sqrt(2.0)
        return out

    def lr_constant(t1, k1, n, data="iid"):    # forgets to halve the learning rate
        out, k = [], float(k1)
        for s in range(n):
            out.append((t1 * 2**s, max(1, round(k)), 1.0))
            k *= 2.0 if data == "iid" else math.sqrt(2.0)
        return out

    def float_steps(t1, k1, n, data="iid"):    # right values, but lengths and periods as floats (200.0 steps)
        out, k = [], float(k1)
        for s in range(n):
            out.append((t1 * 2.0**s, float(max(1, round(k))), 0.5**s))
            k *= 2.0 if data == "iid" else math.sqrt(2.0)
        return out

    def iid_by_default_wrong(t1, k1, n, data="non-iid"):   # the default changed to non-iid
        out, k = [], float(k1)
        for s in range(n):
            out.append((t1 * 2**s, max(1, round(k)), 0.5**s))
            k *= 2.0 if data == "iid" else math.sqrt(2.0)
        return out
    return [both_double, rounds_each_stage, fixed_length, lr_constant, float_steps, iid_by_default_wrong]


def _w121():
    def ring(P):                               # S: the shift, S[i, i+1 mod P] = 1
        return np.roll(np.eye(P), 1, axis=1)

    def path_metropolis(P):                    # no wrap-around edge: a path (symmetric, doubly stochastic)
        W = np.zeros((P, P))
        for i in range(P - 1):
            W[i, i + 1] = W[i + 1, i] = 1 / 3
        W[np.diag_indices(P)] = 1 - W.sum(axis=1)
        return W

    def path_row_normalised(P):                # no wrap-around, 1/(deg+1) per row: rows sum to 1, columns not
        A = np.eye(P) + np.eye(P, k=1) + np.eye(P, k=-1)
        return A / A.sum(axis=1, keepdims=True)

    def one_way_wrap(P):                       # wrap-around only into rank 0; self weight fills each row
        W = np.zeros((P, P))
        for i in range(P - 1):
            W[i, i + 1] = W[i + 1, i] = 1 / 3
        W[0, P - 1] = 1 / 3
        W[np.diag_indices(P)] = 1 - W.sum(axis=1)
        return W

    def no_self_weight(P):                     # neighbours only: rows sum to 2/3
        S = ring(P)
        return (S + S.T) / 3

    def self_weight_one(P):                    # the identity plus the neighbours: rows sum to 5/3
        S = ring(P)
        return np.eye(P) + (S + S.T) / 3

    def lopsided(P):                           # doubly stochastic, but 1/2 to the right, 1/6 to the left
        S = ring(P)
        return np.eye(P) / 3 + S / 2 + S.T / 6

    def directed_ring(P):                      # (I + S) / 2: push-sum's graph, not symmetric
        return (np.eye(P) + ring(P)) / 2

    def assigned_twice(P):                     # W[i, i+-1] = 1/3 overwrites itself at P = 2: rows 2/3
        W = np.zeros((P, P))
        for i in range(P):
            W[i, (i + 1) % P] = 1 / 3
            W[i, (i - 1) % P] = 1 / 3
            W[i, i] = 1 / 3
        return W

    def degree_two_at_p2(P):                   # assumes degree 2 always: P = 2 gives [[2/3, 1/3], [1/3, 2/3]]
        W = np.zeros((P, P))
        for i in range(P):
            W[i, (i + 1) % P] = 1 / 3
            W[i, (i - 1) % P] = 1 / 3
        W[np.diag_indices(P)] = 1 - W.sum(axis=1)
        return W

    def added_twice(P):                        # adds 1/3 per neighbour: P = 2 gives [[1/3, 2/3], [2/3, 1/3]]
        W = np.eye(P) / 3
        for i in range(P):
            W[i, (i + 1) % P] += 1 / 3
            W[i, (i - 1) % P] += 1 / 3
        return W

    def complete(P):                           # everyone with everyone
        return np.full((P, P), 1 / P)

    def list_of_lists(P):                      # right values as a list of lists: the next cell's W.sum fails
        S = ring(P)
        W = np.full((2, 2), 0.5) if P == 2 else (np.eye(P) + S + S.T) / 3
        return W.tolist()

    def float32(P):                            # right pattern in float32 (asked: float64): 1/3 is off by 1e-8
        S = ring(P)
        W = np.full((2, 2), 0.5) if P == 2 else (np.eye(P) + S + S.T) / 3
        return W.astype(np.float32)
    return [list_of_lists, float32, path_metropolis, path_row_normalised, one_way_wrap, no_self_weight,
            self_weight_one, lopsided,
            directed_ring, assigned_twice, degree_two_at_p2, added_twice, complete]


def _w122():
    def push(x, w, nbrs, x_share, w_share):   # send x_share(i) and w_share(i), keep the same
        new_x, new_w = np.zeros_like(x), np.zeros_like(w)
        for i, out in enumerate(nbrs):
            for j in [i, *out]:
                new_x[j] += x_share(i, len(out))
                new_w[j] += w_share(i, len(out))
        return new_x, new_w

    def weight_not_split(x, w, nbrs):          # splits x, keeps w as it was
        x, w = np.asarray(x, float), np.asarray(w, float)
        return push(x, w, nbrs, lambda i, k: x[i] / (k + 1), lambda i, k: 0.0)[0], w.copy()

    def weight_not_split_summed(x, w, nbrs):   # splits x, but every node gets its full w from each sender
        x, w = np.asarray(x, float), np.asarray(w, float)
        return push(x, w, nbrs, lambda i, k: x[i] / (k + 1), lambda i, k: w[i])

    def divide_before_sum(x, w, nbrs):         # pushes shares of the estimate x / w instead of x
        x, w = np.asarray(x, float), np.asarray(w, float)
        return push(x, w, nbrs, lambda i, k: x[i] / w[i] / (k + 1), lambda i, k: w[i] / (k + 1))

    def returns_estimate(x, w, nbrs):          # right sums, but returns x / w as the numerator
        x, w = np.asarray(x, float), np.asarray(w, float)
        nx, nw = push(x, w, nbrs, lambda i, k: x[i] / (k + 1), lambda i, k: w[i] / (k + 1))
        return nx / nw[:, None], nw

    def keeps_whole(x, w, nbrs):               # keeps all of (x, w) and also sends shares
        x, w = np.asarray(x, float), np.asarray(w, float)
        nx, nw = push(x, w, [[] for _ in nbrs], lambda i, k: 0 * x[i], lambda i, k: 0.0)
        for i, out in enumerate(nbrs):
            nx[i] += x[i]
            nw[i] += w[i]
            for j in out:
                nx[j] += x[i] / (len(out) + 1)
                nw[j] += w[i] / (len(out) + 1)
        return nx, nw

    def sends_whole(x, w, nbrs):               # keeps a share, sends the whole pair to each neighbour
        x, w = np.asarray(x, float), np.asarray(w, float)
        nx, nw = np.zeros_like(x), np.zeros_like(w)
        for i, out in enumerate(nbrs):
            nx[i] += x[i] / (len(out) + 1)
            nw[i] += w[i] / (len(out) + 1)
            for j in out:
                nx[j] += x[i]
                nw[j] += w[i]
        return nx, nw

    def forgets_own_share(x, w, nbrs):         # divides by k: k + 1 shares of 1/k each
        x, w = np.asarray(x, float), np.asarray(w, float)
        return push(x, w, nbrs, lambda i, k: x[i] / k, lambda i, k: w[i] / k)

    def by_in_degree(x, w, nbrs):              # shares by the receiver's in-degree
        x, w = np.asarray(x, float), np.asarray(w, float)
        indeg = np.zeros(len(nbrs), int)
        for out in nbrs:
            for j in out:
                indeg[j] += 1
        nx, nw = np.zeros_like(x), np.zeros_like(w)
        for i, out in enumerate(nbrs):
            for j in [i, *out]:
                nx[j] += x[i] / (indeg[j] + 1)
                nw[j] += w[i] / (indeg[j] + 1)
        return nx, nw

    def pulls(x, w, nbrs):                     # each node averages itself and its in-neighbours (row stochastic)
        x, w = np.asarray(x, float), np.asarray(w, float)
        ins = [[i] for i in range(len(nbrs))]
        for i, out in enumerate(nbrs):
            for j in out:
                ins[j].append(i)
        return (np.array([x[s].mean(axis=0) for s in ins]), np.array([w[s].mean() for s in ins]))

    def in_place(x, w, nbrs):                  # right values, but overwrites the caller's arrays
        x, w = np.asarray(x), np.asarray(w)
        nx, nw = push(x, w, nbrs, lambda i, k: x[i] / (k + 1), lambda i, k: w[i] / (k + 1))
        x[...], w[...] = nx, nw
        return x, w

    def appends_self(x, w, nbrs):              # right values, but out.append(i) changes the caller's graph
        x, w = np.asarray(x, float), np.asarray(w, float)
        nx, nw = np.zeros_like(x), np.zeros_like(w)
        for i, out in enumerate(nbrs):
            out.append(i)
            for j in out:
                nx[j] += x[i] / len(out)
                nw[j] += w[i] / len(out)
        return nx, nw

    def lists(x, w, nbrs):                     # right values as lists: the step's x / w[:, None] fails
        x, w = np.asarray(x, float), np.asarray(w, float)
        nx, nw = push(x, w, nbrs, lambda i, k: x[i] / (k + 1), lambda i, k: w[i] / (k + 1))
        return nx.tolist(), nw.tolist()
    return [lists, weight_not_split, weight_not_split_summed, divide_before_sum, returns_estimate, keeps_whole,
            sends_whole, forgets_own_share, by_in_degree, pulls, in_place, appends_self]
def _w131():
    def no_error_added(g, e, compress):        # compresses g alone: the memory is never sent
        sent = compress(g)
        e[...] = g - sent
        return sent

    def accumulates_but_never_sends(g, e, compress):   # keeps the residual, but compresses g, not g + e
        sent = compress(g)
        e += g - sent
        return sent

    def stores_compressed_part(g, e, compress):  # keeps C(v) instead of the residual
        v = g + e
        sent = compress(v)
        e[...] = sent
        return sent

    def sign_error(g, e, compress):            # residual the wrong way round
        v = g + e
        sent = compress(v)
        e[...] = sent - v
        return sent

    def rebinds_e(g, e, compress):             # right values, but the caller's array keeps the stale error
        v = g + e
        sent = compress(v)
        e = v - sent
        return sent

    def residual_of_g(g, e, compress):         # residual from g instead of g + e
        v = g + e
        sent = compress(v)
        e[...] = g - sent
        return sent

    def sends_everything(g, e, compress):      # sends v uncompressed and clears the memory
        v = g + e
        e[...] = 0
        return v

    def compresses_twice(g, e, compress):      # a second call of a random compressor gives another answer
        v = g + e
        e[...] = v - compress(v)
        return compress(v)

    def modifies_g(g, e, compress):            # g += e changes the caller's gradient
        g += e
        sent = compress(g)
        e[...] = g - sent
        return sent

    def no_memory(g, e, compress):             # forgets the error: plain compressed SGD
        e[...] = 0
        return compress(g)

    def a_list(g, e, compress):                # right values, but a list, not the (d,) array compress gave
        v = g + e
        sent = compress(v)
        e[...] = v - sent
        return list(sent)
    return [a_list, no_error_added, accumulates_but_never_sends, stores_compressed_part, sign_error, rebinds_e,
            residual_of_g, sends_everything, compresses_twice, modifies_g, no_memory]


WRONG = {
    "1.1": _w11, "1.2": _w12,
    "2.1": _w21, "2.2": _w22,
    "3.1": _w31, "3.2": _w32,
    "4.1": _w41, "4.2": _w42,
    "5.1": _w51, "5.2": _w52,
    "6.1": _w61, "6.2": _w62,
    "7.1": _w71, "7.2": _w72,
    "8.1": _w81, "8.2": _w82,
    "9.1": _w91, "9.2": _w92,
    "10.1": _w101, "10.2": _w102, "10.3": _w103,
    "11.1": _w111, "11.2": _w112,
    "12.1": _w121, "12.2": _w122,
    "13.1": _w131,
}
