"""Right answers to the tutorials' exercises written differently from the
reference solutions (another order of operations, another NumPy idiom,
another container): each check must ACCEPT them, so that a check cannot
demand one particular way of being right. Among them, for the three kinds of
unfair verdict looked for in every check (issue 45): answers whose last bit
differs from the check's own arithmetic (a check compares with a tolerance),
answers that work in place on arrays of their OWN (only the caller's arrays
are protected), and answers that complete their own work in another correct
way (a check must not do it for them, nor insist on one way).

``RIGHT[exercise_id]()`` returns a list of answers (built lazily, so this
module imports nothing heavy).
"""
from __future__ import annotations

import math

import numpy as np


def _r11():
    import minips as mp

    class ViaTanh(mp.Function):                # sigmoid(a) = (1 + tanh(a / 2)) / 2, finite for any a
        def forward(self, a):
            self.a = a
            return np.logaddexp(0.0, a)

        def backward(self, g):
            return g * (0.5 * np.tanh(0.5 * self.a) + 0.5)

    class ViaSoftplusOfMinusA(mp.Function):    # sigmoid(a) = exp(-softplus(-a)), from the forward's own trick
        def forward(self, a):
            self.a = a
            return np.logaddexp(0.0, a)

        def backward(self, g):
            return np.exp(-np.logaddexp(0.0, -self.a)) * g

    class ClipsACopy(mp.Function):             # clips a copy of the input (never self.a itself), in-place ops on it
        def forward(self, a):
            self.a = a
            return np.logaddexp(0.0, a)

        def backward(self, g):
            a = np.clip(self.a, -700.0, 700.0)     # a new array: exp(-a) stays finite
            out = np.empty_like(np.asarray(g, dtype=float))
            np.divide(g, 1.0 + np.exp(-a), out=out)
            return out
    return [ViaTanh, ViaSoftplusOfMinusA, ClipsACopy]


def _r12():
    def in_place_on_a_copy(x0):                # in-place arithmetic on its own array, x0 untouched
        out = np.array(x0, dtype=float)
        out *= 2
        out += 3
        return out
    return [lambda x0: np.full_like(np.asarray(x0, dtype=float), 3.0) + x0 + x0,
            lambda x0: np.add(np.multiply(x0, 2.0), 3), in_place_on_a_copy]


def _r21():
    from minips.kernels import conv as kconv

    def einsum(x, w, b, stride, padding):       # the same product written with einsum on a 4-D cols
        g = kconv.geometry(x.shape, w.shape, stride, padding)
        cols = kconv.im2col(x, g).reshape(-1, g.N, g.P, g.Q)
        return np.einsum("kc,cnpq->nkpq", w.reshape(g.K, -1), cols) + b.reshape(1, -1, 1, 1)

    def swapaxes(x, w, b, stride, padding):     # reshape to (K, N, P*Q), swap, reshape back
        g = kconv.geometry(x.shape, w.shape, stride, padding)
        y = (w.reshape(g.K, -1) @ kconv.im2col(x, g)).reshape(g.K, g.N, -1).swapaxes(0, 1)
        return y.reshape(g.N, g.K, g.P, g.Q) + b[:, None, None]

    def bias_added_in_place(x, w, b, stride, padding):   # its own result array changed in place; tensordot
        g = kconv.geometry(x.shape, w.shape, stride, padding)
        cols = kconv.im2col(x, g)
        y = np.ascontiguousarray(np.tensordot(w.reshape(g.K, -1), cols, axes=1).reshape(g.K, g.N, g.P, g.Q)
                                 .transpose(1, 0, 2, 3))
        y += b.reshape(1, -1, 1, 1)
        return y
    return [einsum, swapaxes, bias_added_in_place]


def _r22():
    def per_layer(c_in, size, classes, widths, hidden):     # a table of (weights, biases), numpy ints
        H, W = size
        c1, c2 = widths
        layers = [(c1 * c_in * 9, c1), (c2 * c1 * 9, c2), (c2 * (H // 4) * (W // 4) * hidden, hidden),
                  (hidden * classes, classes)]
        return np.sum(np.array(layers, dtype=np.int64))

    def pooled_twice(c_in, size, classes, widths, hidden):  # floor division applied pool by pool
        h, w = (s // 2 // 2 for s in size)
        c1, c2 = widths
        return (9 * c_in + 1) * c1 + (9 * c1 + 1) * c2 + (c2 * h * w + 1) * hidden + (hidden + 1) * classes
    return [per_layer, pooled_twice]


def _r31():
    import minips as mp

    def split_batches(model, x, y, batch_size=500):    # np.array_split into ceil(n / batch) parts; np.float64
        model.eval()
        hits = []
        with mp.no_grad():
            for xb, yb in zip(np.array_split(x, math.ceil(len(x) / batch_size)),
                              np.array_split(y, math.ceil(len(x) / batch_size))):
                hits.append(model(mp.Tensor(xb)).data.argmax(axis=1) == yb)
        model.train()
        return np.concatenate(hits).mean()

    def restores_mode(model, x, y, batch_size=500):    # counts as floats, restores the mode it found
        mode = model.training
        model.eval()
        correct = 0.0
        with mp.no_grad():
            i = 0
            while i < len(x):
                logits = model(mp.Tensor(x[i:i + batch_size])).data
                correct += float(np.sum(np.argmax(logits, 1) == y[i:i + batch_size]))
                i += batch_size
        model.train(mode)
        return correct / len(y)

    def no_grad_as_decorator(model, x, y, batch_size=500):   # mp.no_grad() decorating a helper; try/finally
        @mp.no_grad()
        def predict(xb):
            return model(mp.Tensor(xb)).data.argmax(1)
        model.eval()
        try:
            hits = np.concatenate([predict(x[i:i + batch_size]) for i in range(0, len(x), batch_size)]) == y
            return float(np.mean(hits))
        finally:
            model.train()
    return [split_batches, restores_mode, no_grad_as_decorator]


def _r32():
    def mu_last(w, d, v, lr, mu):              # v * mu + d; a list
        v = d.copy() if v is None else v * mu + d
        return [w - lr * v, v]

    def zeros_start(w, d, v, lr, mu):          # v = 0 before the first step: mu * 0 + d = d
        v = (np.zeros_like(d) if v is None else v) * mu + d
        return w - lr * v, v

    def in_place_on_copies(w, d, v, lr, mu):   # SGD.apply's in-place updates, done on copies of w and v
        if v is None:
            v = d.copy()
        else:
            v = v.copy()
            v *= mu
            v += d
        w = w.copy()
        w -= lr * v
        return w, v
    return [mu_last, zeros_start, in_place_on_copies]


def _r41():
    def divide_first(comm, x):                 # what PyTorch DDP does: scale, then sum
        y = x / comm.size
        comm.allreduce(y)
        return y

    def gather_and_average(comm, x):           # every rank's array, then the mean (float32 stays float32)
        return np.mean(np.stack(comm.allgather(x)), axis=0)

    def multiply_in_place(comm, x):
        out = np.array(x, dtype=np.float32, copy=True)
        comm.allreduce(out)
        out *= np.float32(1.0 / comm.size)
        return out

    def nonblocking_and_wait(comm, x):         # section 3's Iallreduce, completed at once
        y = x.copy()
        comm.iallreduce(y).wait()
        return y / comm.size

    def mpi4py_in_place(comm, x):              # the mpi4py call shown in section 2 (MPI.IN_PLACE)
        from mpi4py import MPI
        y = x.copy()
        comm.mpi.Allreduce(MPI.IN_PLACE, y, op=MPI.SUM)
        return y / comm.size

    def mpi4py_send_receive(comm, x):          # mpi4py with separate send and receive buffers
        from mpi4py import MPI
        total = np.empty_like(x)
        comm.mpi.Allreduce(x, total, op=MPI.SUM)
        return total / np.float32(comm.size)
    return [divide_first, gather_and_average, multiply_in_place, nonblocking_and_wait, mpi4py_in_place,
            mpi4py_send_receive]


def _r42():
    def test_until_done(comm, buf, chunks):    # progress after every chunk, then poll with test() instead of wait()
        req = comm.iallreduce(buf)
        for chunk in chunks:
            chunk()
            comm.progress()
        while not req.test():
            comm.progress()
        return req

    def poll_done_flag(comm, buf, chunks):     # reads req.done, driving progress until it is True
        req = comm.iallreduce(buf)
        for chunk in chunks:
            chunk()
            comm.progress()
        while not req.done:
            comm.progress()
        return req

    def wait_all(comm, buf, chunks):           # Comm.wait_all completes every request in flight
        req = comm.iallreduce(buf)
        for chunk in chunks:
            chunk()
            comm.progress()
        comm.wait_all()
        return req

    def progress_before_too(comm, buf, chunks):  # an extra progress call before the first chunk
        req = comm.iallreduce(buf)
        comm.progress()
        for i in range(len(chunks)):
            chunks[i]()
            comm.progress()
        req.wait()
        return req
    return [test_until_done, progress_before_too, poll_done_flag, wait_all]


def _r51():
    def divide_first(comm, grad, weights, optimizer):   # scale each rank's gradient, then sum (DDP's order)
        grad /= comm.size
        comm.allreduce(grad)
        optimizer.apply(0, weights, grad)

    def gathered(comm, grad, weights, optimizer):       # every rank's gradient, averaged in the same order, in place
        grad[...] = np.mean(np.stack(comm.allgather(grad)), axis=0)
        optimizer.apply(0, weights, grad)

    def nonblocking_and_wait(comm, grad, weights, optimizer):   # step 4's Iallreduce, completed at once
        comm.iallreduce(grad).wait()
        grad /= comm.size
        optimizer.apply(0, weights, grad)

    def mpi4py_in_place(comm, grad, weights, optimizer):        # mpi4py's Allreduce, as step 4 shows it
        from mpi4py import MPI
        comm.mpi.Allreduce(MPI.IN_PLACE, grad, op=MPI.SUM)
        np.divide(grad, comm.size, out=grad)
        optimizer.apply(0, weights, grad)
    return [divide_first, gathered, nonblocking_and_wait, mpi4py_in_place]


def _r52():
    def factored(nbytes, P, alpha, beta):
        return 0.0 if P < 2 else 2 * (P - 1) * (alpha + nbytes / P * beta)

    def phases(nbytes, P, alpha, beta):        # reduce-scatter and allgather written out, numpy floats
        steps = np.float64(P - 1)
        one_phase = steps * alpha + steps * (nbytes / P) * beta
        return 2 * one_phase
    return [factored, phases]


def _r61():
    def tuples_while(sizes, bucket_mb):        # a while loop, buckets as tuples
        limit = bucket_mb * 2**20 if bucket_mb > 0 else math.inf
        out, cur, nb, i = [], [], 0, len(sizes) - 1
        while i >= 0:
            cur.append(i)
            nb += 4 * sizes[i]
            if nb >= limit:
                out.append(tuple(cur))
                cur, nb = [], 0
            i -= 1
        return out + ([tuple(cur)] if cur else [])

    def numpy_indices(sizes, bucket_mb):       # numpy int64 indices
        order = np.arange(len(sizes))[::-1]
        if not bucket_mb:
            return [list(order)]
        out, cur, nb = [], [], 0
        for i in order:
            cur.append(i)
            nb += 4 * sizes[i]
            if nb >= bucket_mb * 2**20:
                out.append(cur)
                cur, nb = [], 0
        return out + [cur] * bool(cur)

    def reversed_copy(sizes, bucket_mb):       # walks a reversed COPY of sizes (the caller's list keeps its order)
        n, limit = len(sizes), (bucket_mb * 2**20 or math.inf)
        out, cur, nb = [], [], 0
        for j, size in enumerate(sizes[::-1]):
            cur.append(n - 1 - j)
            nb += 4 * size
            if nb >= limit:
                out.append(cur)
                cur, nb = [], 0
        return out + ([cur] if cur else [])
    return [tuples_while, numpy_indices, reversed_copy]


def _r62():
    def dict_of_handles(model, batch):
        order, handles = [], {}
        for name, p in model.named_parameters():
            handles[name] = p.register_grad_hook(lambda t, name=name: order.append(name))
        loss = model.loss(batch)
        loss.backward()
        for h in handles.values():
            h.remove()
        return order

    def closure_factory(model, batch):
        order = []

        def recorder(name):
            return lambda t: order.append(name)
        hs = [p.register_grad_hook(recorder(n)) for n, p in model.named_parameters()]
        try:
            model.loss(batch).backward()
        finally:
            while hs:
                hs.pop().remove()
        return list(order)
    return [dict_of_handles, closure_factory]


def _r71():
    def list_queue(grad_fn, w0, k, lr, momentum, steps):   # a list, v = 0 at first (mu * 0 + g = g)
        w = np.array(w0, dtype=np.float32)
        v = np.zeros_like(w)
        flight = []
        for t in range(steps):
            flight.append(grad_fn(w, t))
            if len(flight) == k + 1:
                v = momentum * v + flight.pop(0)
                w = w - lr * v
        return w

    def by_index(grad_fn, w0, k, lr, momentum, steps):     # keep every gradient; apply g_{t-k} at step t
        w, v, gs = w0.copy(), None, []
        for t in range(steps):
            gs.append(grad_fn(w, t))
            if t >= k:
                g = gs[t - k]
                v = g if v is None else momentum * v + g
                w = w - lr * v
        return w
    return [list_queue, by_index]


def _r72():
    return [lambda tc, tm, algo: {"sync": tc + tm, "pseudo-sync": max(tc, tm)}[algo],
            lambda tc, tm, algo: tc + tm if algo == "sync" else (tc if tc > tm else tm),
            # max written as (a + b + |a - b|) / 2: the last bit may differ from max(a, b)
            lambda tc, tm, algo: tc + tm if algo == "sync" else (tc + tm + abs(tc - tm)) / 2]


def _r81():
    from minips.distributed.algorithms.predictors import Predictor

    class Incremental(Predictor):              # S += alpha (G - S) in float64, a float32 copy returned
        def __init__(self, staleness=1, alpha=0.5):
            super().__init__(staleness)
            self.alpha, self.S = alpha, None

        def forecast(self, G, w_now, w_then):
            if self.S is None:
                self.S = G.astype(np.float64)
            else:
                self.S += self.alpha * (G - self.S)
            return self.S.astype(np.float32)

    class InPlaceOnItsCopy(Predictor):         # the in-place update, on a copy of the first arrival
        def __init__(self, staleness=1, alpha=0.5):
            super().__init__(staleness)
            self.alpha, self.S = alpha, None

        def forecast(self, G, w_now, w_then):
            if self.S is None:
                self.S = G.copy()
            else:
                self.S *= (1 - self.alpha)
                self.S += self.alpha * G
            return self.S.copy()
    return [Incremental, InPlaceOnItsCopy]


def _r82():
    from minips.distributed.algorithms.predictors import Predictor

    class ErrorForm(Predictor):                # Holt's error-correction form: L = L + B + alpha (G - L - B)
        def __init__(self, staleness=1, alpha=0.5, beta=0.1):
            super().__init__(staleness)
            self.alpha, self.beta = alpha, beta
            self.L = self.B = None

        def forecast(self, G, w_now, w_then):
            G = G.astype(np.float64)
            if self.L is None:
                self.L, self.B = G, np.zeros_like(G)
            else:
                prev = self.L
                self.L = prev + self.B + self.alpha * (G - prev - self.B)
                self.B = self.B + self.beta * (self.L - prev - self.B)
            return np.asarray(self.L + self.k * self.B, dtype=np.float32)

    class InPlaceOnItsCopies(Predictor):       # level and trend updated in place, in arrays of its own
        def __init__(self, staleness=1, alpha=0.5, beta=0.1):
            super().__init__(staleness)
            self.alpha, self.beta = alpha, beta
            self.L = self.B = None

        def forecast(self, G, w_now, w_then):
            if self.L is None:
                self.L, self.B = np.array(G, copy=True), np.zeros_like(G)
            else:
                prev = self.L.copy()
                self.L *= 1 - self.alpha
                self.L += (1 - self.alpha) * self.B + self.alpha * G
                self.B *= 1 - self.beta
                self.B += self.beta * (self.L - prev)
            return self.L + self.k * self.B
    return [ErrorForm, InPlaceOnItsCopies]


def _r91():
    from minips.data.moving_fmnist import VOCAB

    def fill(text, length):                    # start from all <pad>, then write the ids
        words = text.split()
        out = np.full(length, VOCAB.PAD, dtype=np.int64)
        out[0] = VOCAB.BOS
        for i, w in enumerate(words):
            out[1 + i] = VOCAB.index[w] if w in VOCAB.index else VOCAB.UNK
        out[1 + len(words)] = VOCAB.EOS
        return out
    return [fill]


def _r92():
    def boolean_index(logits, targets, pad_id):    # log-sum-exp, the real positions picked by a mask
        m = logits.max(axis=-1, keepdims=True)
        lse = (m + np.log(np.exp(logits - m).sum(axis=-1, keepdims=True)))[..., 0]
        mask = targets != pad_id
        chosen = np.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
        return np.mean(lse[mask] - chosen[mask])   # a numpy float64

    def scipy_logsumexp(logits, targets, pad_id):  # scipy's log-sum-exp; its own shifted copy changed in place
        from scipy.special import logsumexp
        z = logits - logits.max(axis=-1, keepdims=True)
        z -= logsumexp(z, axis=-1, keepdims=True)
        nll = -np.take_along_axis(z, targets[..., None], axis=-1)[..., 0]
        keep = targets != pad_id
        return nll[keep].sum() / keep.sum()
    return [boolean_index, scipy_logsumexp]


def _r101():
    def scaled_columns(nbytes, seconds, P):    # the weighted system written as (A / t) x = 1
        n, t = np.asarray(nbytes, float), np.asarray(seconds, float)
        A = np.column_stack([2 * (P - 1) / t, 2 * (P - 1) / P * n / t])
        (a, b), *_ = np.linalg.lstsq(A, np.ones_like(t), rcond=None)
        return np.maximum(a, 0.0), np.maximum(b, 0.0)   # numpy floats, a list would do too

    def normal_equations(nbytes, seconds, P):  # (A^T A) x = A^T 1 solved directly: other rounding than lstsq's
        n, t = np.asarray(nbytes, float), np.asarray(seconds, float)
        A = np.column_stack([np.full_like(n, 2.0 * (P - 1)), 2.0 * (P - 1) / P * n]) / t[:, None]
        scale = np.abs(A).max(axis=0)          # columns scaled to 1 first: alpha and beta differ by 1e4
        x = np.linalg.solve((A / scale).T @ (A / scale), (A / scale).T @ np.ones_like(t)) / scale
        return [max(0.0, float(x[0])), max(0.0, float(x[1]))]
    return [scaled_columns, normal_equations]


def _r102():
    from minips.distributed.costmodel import ring_allreduce_time

    def ratios(tc, n, P, a, b, algo):          # 1 / (1 + T / t_c); min(1, t_c / T) (T = 0 on one rank)
        T = ring_allreduce_time(n, P, a, b)
        if algo == "sync":
            return 1.0 / (1.0 + T / tc)
        return 1.0 if T == 0 else min(1.0, tc / T)
    return [ratios]


def _r103():
    def with_numpy(curve, t, target):          # arrays and argmax of the mask; a plain float back
        c = np.asarray(list(curve), dtype=float).reshape(-1, 2)
        hit = c[:, 1] >= target
        return float(c[np.argmax(hit), 0] * t) if hit.any() else None

    def by_index(curve, t, target):            # indices instead of unpacking
        for i in range(len(curve)):
            if not curve[i][1] < target:
                return curve[i][0] * t
        return None
    return [with_numpy, by_index]


def _r111():
    def tile(row, P):
        return np.tile(row, (P, 1))
    return [lambda W: np.repeat(np.mean(W, axis=0, keepdims=True), len(W), axis=0),
            lambda W: np.broadcast_to(np.asarray(W).mean(0), np.shape(W)).copy(),   # a view, copied: writable
            lambda W: np.ones_like(W) * np.asarray(W).sum(axis=0) / len(W),
            # the three forms of issue 45, each a last-bit rounding away from sum / P
            lambda W: tile((W / len(W)).sum(axis=0), len(W)),
            lambda W: tile(W.sum(0) * (1.0 / len(W)), len(W)),
            lambda W: np.full((len(W), len(W)), 1.0 / len(W)) @ W]


def _r112():
    def closed_form(t1, k1, n_stages, data="iid"):   # k1 * 2^s or k1 * 2^(s/2), rounded per stage
        growth = 2.0 if data == "iid" else math.sqrt(2.0)
        return [(t1 << s, max(1, round(k1 * growth ** s)), 2.0 ** -s) for s in range(n_stages)]

    def lists(t1, k1, n_stages, data="iid"):         # lists instead of tuples, numpy scalars
        k, out = np.float64(k1), []
        for s in range(n_stages):
            out.append([np.int64(t1 * 2 ** s), np.int64(max(1, round(float(k)))), np.float64(0.5) ** s])
            k = k * (2 if data == "iid" else np.sqrt(2))
        return out
    return [closed_form, lists]


def _r121():
    def rolled(P):                             # circulant: I/3 + S/3 + S^T/3; one edge of weight 1/2 when P = 2
        if P == 2:
            return np.full((2, 2), 0.5)
        S = np.roll(np.eye(P), 1, axis=1)
        return (np.eye(P) + S + S.T) / 3.0

    def from_neighbour_sets(P):                # Metropolis-Hastings from the set of distinct neighbours
        nbrs = [{(i - 1) % P, (i + 1) % P} - {i} for i in range(P)]
        W = np.zeros((P, P))
        for i in range(P):
            for j in nbrs[i]:
                W[i, j] = 1.0 / (1 + max(len(nbrs[i]), len(nbrs[j])))
            W[i, i] = 1.0 - W[i].sum()
        return W

    def laplacian(P):                          # W = I - L / (1 + max degree): the self weight rounds differently
        A = np.zeros((P, P))
        for i in range(P):
            A[i, (i + 1) % P] = A[(i + 1) % P, i] = 1.0
        L = np.diag(A.sum(axis=1)) - A
        return np.eye(P) - L / (1.0 + A.sum(axis=1).max())
    return [rolled, from_neighbour_sets, laplacian]


def _r122():
    def matrix(x, w, out_neighbors):           # build the column-stochastic A, then one product each
        n = len(out_neighbors)
        A = np.zeros((n, n))
        for i, out in enumerate(out_neighbors):
            A[[i, *out], i] = 1.0 / (len(out) + 1)
        return A @ x, A @ w

    def list_of_arrays(x, w, out_neighbors):   # returns a list [x, w] (unpacks the same), shares via np.add.at
        x, w = np.asarray(x, dtype=np.float64), np.asarray(w, dtype=np.float64)
        nx, nw = np.zeros_like(x), np.zeros_like(w)
        for i, out in enumerate(out_neighbors):
            k = len(out) + 1
            dst = np.array([i, *out])
            np.add.at(nx, dst, x[i] / k)
            np.add.at(nw, dst, w[i] / k)
        return [nx, nw]

    def extended_copies(x, w, out_neighbors):  # each node's targets in a NEW list: out_neighbors stays as it was
        nx, nw = np.zeros_like(x, dtype=float), np.zeros_like(w, dtype=float)
        for i, out in enumerate(out_neighbors):
            targets = list(out)
            targets.append(i)
            for j in targets:
                nx[j] += x[i] / len(targets)
                nw[j] += w[i] / len(targets)
        return nx, nw
    return [matrix, list_of_arrays, extended_copies]


def _r131():
    def subtract_out(g, e, compress):          # the residual written with out=
        v = g + e
        sent = compress(v)
        np.subtract(v, sent, out=e)
        return sent

    def add_in_place(g, e, compress):          # e += g - C(g + e): the same residual, in place
        sent = compress(e + g)
        e += g - sent
        return sent
    return [subtract_out, add_in_place]


RIGHT = {
    "1.1": _r11, "1.2": _r12, "2.1": _r21, "2.2": _r22, "3.1": _r31, "3.2": _r32, "4.1": _r41, "4.2": _r42,
    "5.1": _r51, "5.2": _r52, "6.1": _r61, "6.2": _r62, "7.1": _r71, "7.2": _r72, "8.1": _r81, "8.2": _r82,
    "9.1": _r91, "9.2": _r92, "10.1": _r101, "10.2": _r102, "10.3": _r103, "11.1": _r111, "11.2": _r112, "12.1": _r121,
    "12.2": _r122, "13.1": _r131,
}
