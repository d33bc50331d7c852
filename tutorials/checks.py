"""The checks of the tutorials' exercises.

Each exercise is registered here under its number ("1.1", ...) with the step
file it belongs to and the name of the answer (the same name in the step and
in ``tutorials/solutions/<step>.py``). A check calls your answer, compares it
with what minips itself computes, and raises ``AssertionError`` with a hint
when it differs. ``tutorials/_common.py::exercise`` runs them; the tests run
them on the reference solutions and on wrong answers (tests/test_tutorials.py).

Reading a check before trying the exercise is allowed, but spoils the fun.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np


@dataclass
class Exercise:
    step: str          # the step's file name without .py, e.g. "01_tensors_and_autograd"
    name: str          # the answer's name in the step and in its solution file
    check: Callable    # check(answer, **context): raises AssertionError if wrong
    praise: str = ""   # printed after "correct."
    mpi: bool = False  # the check needs several ranks to be meaningful


#: exercise id -> Exercise
EXERCISES: dict[str, Exercise] = {}


def register(exercise_id: str, step: str, name: str, praise: str = "", mpi: bool = False):
    def deco(fn):
        EXERCISES[exercise_id] = Exercise(step, name, fn, praise, mpi)
        return fn
    return deco


def _plain(v):
    """``v`` for a message: NumPy scalars, arrays and containers of them as plain
    Python numbers and lists (``0.5``, not ``np.float64(0.5)``)."""
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, (list, tuple)):
        return type(v)(_plain(x) for x in v)
    return v


def _unchanged(arg, before, name: str, who: str, fix: str):
    """``arg`` (an argument the check passed to the answer ``who``) must still
    equal ``before``, the copy the check took: an answer must not write into
    the caller's arrays unless the exercise asks it to. ``fix`` says what to
    write instead."""
    if isinstance(before, np.ndarray):
        if not isinstance(arg, np.ndarray) or arg.shape != before.shape:
            how = f"its shape went from {before.shape} to {np.shape(arg)} (`{name}.shape = ...` reshapes the " \
                  f"caller's array; `{name}.reshape(...)` makes a new view)"
        elif np.array_equal(arg, before, equal_nan=before.dtype.kind in "fc"):
            return
        else:
            same = np.asarray(arg == before)
            if before.dtype.kind in "fc":
                same |= np.isnan(arg) & np.isnan(before)
            i = tuple(int(v) for v in np.argwhere(~same)[0])
            how = f"{name}{list(i)} was {_plain(before[i])!r}, is now {_plain(arg[i])!r}"
    elif arg == before:
        return
    else:
        how = f"it was {_plain(before)!r}, is now {_plain(arg)!r}"
    raise AssertionError(f"{who} changed its argument {name} in place ({how}): the caller's data is not yours to "
                         f"change. {fix}")


def _close(got, want, what: str, rtol=1e-6, atol=1e-8, hint: str = ""):
    got = np.asarray(got)
    want = np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}. {hint}".rstrip()
    if not np.allclose(got, want, rtol=rtol, atol=atol, equal_nan=False):
        excess = np.abs(got - want) - atol - rtol * np.abs(want)  # the worst element out of tolerance
        i = np.unravel_index(np.argmax(np.nan_to_num(excess, nan=np.inf)), want.shape) if want.shape else ()
        raise AssertionError(f"{what}: at index {tuple(int(v) for v in i)} got {_plain(got[i])!r}, expected "
                             f"{_plain(want[i])!r}. {hint}".rstrip())


# =============================================================================
# Step 1: tensors and autograd
# =============================================================================
S01 = "01_tensors_and_autograd"


@register("1.1", S01, "Softplus", "gradcheck agrees with your backward.")
def check_softplus(Softplus):
    import minips as mp
    from minips.gradcheck import GradcheckError, gradcheck

    rng = np.random.default_rng(11)
    a = rng.standard_normal((3, 5)) * 3
    a[0, 0], a[0, 1] = 40.0, -40.0   # large |a|: the derivative must reach its limits 1 and 0
    try:
        gradcheck(lambda t: Softplus.apply(t), [a])
    except GradcheckError as e:
        raise AssertionError(f"your backward disagrees with finite differences: {e}. "
                             "Hint: d/da log(1 + e^a) = e^a / (1 + e^a), the logistic sigmoid of a; "
                             "multiply by g.") from None
    except NotImplementedError:
        raise  # the placeholder is still there (NotImplementedError is a RuntimeError)
    except RuntimeError as e:  # wrong shape, wrong number of outputs
        raise AssertionError(f"autograd rejected your backward: {e}") from None
    # backward reads g and the saved input; it must not write into them: g is autograd's (the same array may go
    # to other nodes) and self.a is the caller's tensor's data
    t = mp.tensor(a.copy(), requires_grad=True)
    node = Softplus.apply(t)._fn
    g = rng.standard_normal(a.shape)
    g_before, a_before = g.copy(), t.data.copy()
    node.backward(g)
    _unchanged(g, g_before, "g", "your backward", "Return a new array (g * sigmoid(a)), not g *= ... or "
               "np.multiply(g, s, out=g).")
    _unchanged(t.data, a_before, "self.a", "your backward",
               "self.a is the input tensor's own data (x.data changed too): compute from it without writing into it "
               "(no out=self.a, no self.a *= ...).")
    t = mp.tensor(np.array([0.0]), requires_grad=True)
    Softplus.apply(t).sum().backward()
    _close(t.grad, [0.5], "d softplus/da at a = 0", hint="it should be sigmoid(0) = 0.5")
    # the forward itself (gradcheck cannot see a constant added to it), large |a| included
    a = np.array([-800.0, -40.0, -1.5, 0.0, 0.7, 40.0, 800.0])
    with np.errstate(all="ignore"):
        y = Softplus.apply(mp.tensor(a)).data
    _close(y, np.logaddexp(0.0, a), "softplus(a)", rtol=1e-12, atol=1e-12,
           hint="Hint: log(1 + e^a); np.logaddexp(0, a) computes it without overflow for large a.")
    # the backward where the textbook form overflows: e^800 is inf in float64, and inf/inf is nan
    t = mp.tensor(a.copy(), requires_grad=True)
    with np.errstate(all="ignore"):
        Softplus.apply(t).sum().backward()
    _unchanged(t.data, a, "self.a", "your backward",
               "self.a is the input tensor's own data (x.data changed too): clip or transform a copy "
               "(np.clip(self.a, -30, 30) without out=), or use the form that never overflows, from "
               "np.exp(-np.abs(self.a)).")
    with np.errstate(all="ignore"):  # the sigmoid from exp(-|a|): never overflows, exact in the tails
        want = np.where(a >= 0, 1 / (1 + np.exp(-a)), np.exp(a) / (1 + np.exp(a)))
    assert np.all(np.isfinite(t.grad)), (
        f"d softplus/da at a = {_plain(a[~np.isfinite(t.grad)])} is {_plain(t.grad[~np.isfinite(t.grad)])}: "
        "e^a / (1 + e^a) overflows for large a (inf / inf = nan). Hint: write the sigmoid as 1 / (1 + e^-a), "
        "or 0.5 * tanh(a / 2) + 0.5, which stay finite.")
    # atol 1e-12: a right answer may round sigmoid(-40) = 4e-18 to 0 (0.5 * tanh(a / 2) + 0.5 does)
    _close(t.grad, want, "d softplus/da at large |a|", rtol=1e-9, atol=1e-12,
           hint="Hint: the derivative tends to 1 for large a and to 0 for very negative a.")


@register("1.2", S01, "predicted_grad", "gradients add up: 2*x from the first backward, 3 from the second.")
def check_predicted_grad(predicted_grad):
    import minips as mp

    for seed in range(3):
        x0 = np.random.default_rng(seed).standard_normal(4)
        x0_arg = x0.copy()
        got = predicted_grad(x0_arg)
        _unchanged(x0_arg, x0, "x0", "predicted_grad", "Compute the answer into a new array (2 * x0 + 3), not with "
                   "x0 *= 2 or x0 += 3.")
        _array(got, f"predicted_grad(x0) for x0 of shape {x0.shape}", x0.shape, kind="f")
        x = mp.tensor(x0, requires_grad=True)
        (x * x).sum().backward()
        (3 * x).sum().backward()
        _close(got, x.grad, f"predicted x.grad for x0 = {np.round(x0, 3)}",
               hint="Hint: the second backward adds to what the first one left in x.grad.")


# =============================================================================
# Step 2: layers and kernels
# =============================================================================
S02 = "02_layers_and_kernels"


@register("2.1", S02, "conv2d_im2col", "that is how minips.kernels.conv.conv2d_forward works (plus a "
          "direct path for thin inputs and a Numba kernel for the layout change).")
def check_conv2d_im2col(conv2d_im2col):
    from minips.kernels import reference as ref

    rng = np.random.default_rng(21)
    cases = [((1, 1, 4, 4), (1, 1, 3, 3), 1, 0), ((2, 3, 7, 6), (4, 3, 3, 3), 1, 1),
             ((3, 2, 9, 8), (5, 2, 3, 2), 2, 1), ((2, 4, 6, 6), (3, 4, 1, 1), (2, 1), (0, 0))]
    for xs, ws, stride, pad in cases:
        x = rng.standard_normal(xs)
        w = rng.standard_normal(ws)
        b = rng.standard_normal(ws[0])
        want = ref.conv2d_forward(x, w, b, stride, pad)
        args = (x.copy(), w.copy(), b.copy())
        got = conv2d_im2col(*args, stride, pad)
        for name, arg, before in zip("xwb", args, (x, w, b)):
            _unchanged(arg, before, name, "conv2d_im2col", f"Use {name}.reshape(...) (a new view) and operations "
                       "that make new arrays; the layer calls this with its own input and parameters.")
        _array(got, f"conv2d_im2col of x {xs}, w {ws}", want.shape, kind="f",
               hint="y has shape (N, K, P, Q).")
        _close(got, want, f"conv2d of x {xs}, w {ws}, stride {stride}, padding {pad}", rtol=1e-9, atol=1e-9,
               hint="Hint: y2 = w.reshape(K, -1) @ cols has shape (K, N*P*Q); reshape it to (K, N, P, Q), "
                    "move the N axis first, and add the bias per channel.")


@register("2.2", S02, "convnet_num_parameters", "the first Linear layer's c2*(H/4)*(W/4)*hidden term dominates.")
def check_convnet_num_parameters(convnet_num_parameters):
    from minips.models import ConvNet

    for args in [(1, (28, 28), 10, (32, 64), 128), (3, (32, 32), 10, (16, 32), 64),
                 (1, (30, 22), 7, (8, 12), 20)]:
        got = convnet_num_parameters(*args)
        _number(got, f"convnet_num_parameters{args}", integral=True,
                hint="A count of parameters is an int (// divides rounding down and stays an int).")
        want = ConvNet(args[0], args[1], args[2], widths=args[3], hidden=args[4]).num_parameters()
        assert got == want, (f"convnet_num_parameters{args} = {_plain(got)}, but ConvNet{args} has {want} parameters. "
                             "Hint: a KxCxRxS convolution has K*C*R*S weights and K biases; each 2x2 pooling "
                             "halves H and W, rounding down.")


# =============================================================================
# Step 3: training
# =============================================================================
S03 = "03_train_a_convnet"


@register("3.1", S03, "accuracy")
def check_accuracy(accuracy):
    import minips as mp
    from minips import nn

    class Spy(nn.Module):
        """The model's last layer, an identity that records how each forward pass ran."""
        def __init__(self):
            super().__init__()
            self.calls = []    # (gradients recorded?, training mode?) per forward pass

        def forward(self, x):
            self.calls.append((mp.is_grad_enabled(), self.training))
            return x

    rng = np.random.default_rng(31)
    mp.random.seed(3)
    spy = Spy()
    model = nn.Sequential(nn.Flatten(), nn.Linear(20, 64), nn.ReLU(), nn.Dropout(0.5), nn.Linear(64, 3), spy)
    # 230 images in batches of 100 (2 full batches + a short one); 1100 with the default batch size (500, as the
    # step calls it): 2 full + a short one; 40 with the default: one short batch
    for n, bs in ((230, 100), (1100, None), (40, None)):
        x = rng.standard_normal((n, 1, 4, 5)).astype(np.float32)
        y = rng.integers(0, 3, n)
        model.eval()
        with mp.no_grad():
            want = float((model(mp.Tensor(x)).data.argmax(1) == y).mean())
        model.train()
        what = f"accuracy of {n} images" + (f", batch_size={bs}" if bs else " (default batch_size)")
        spy.calls.clear()
        x_arg, y_arg = x.copy(), y.copy()
        got = accuracy(model, x_arg, y_arg, bs) if bs else accuracy(model, x_arg, y_arg)
        for name, arg, before in (("x", x_arg, x), ("y", y_arg, y)):
            _unchanged(arg, before, name, "accuracy", "Read the images and labels; do not write into them.")
        assert spy.calls, f"{what}: accuracy() never called the model (model(mp.Tensor(xb)))"
        assert not any(grad for grad, _ in spy.calls), (
            f"{what}: the model ran with gradients on, so every forward pass recorded a graph for backward (memory and "
            "time for nothing): run the forward passes inside `with mp.no_grad():`")
        assert not any(training for _, training in spy.calls), (
            f"{what}: the model ran in training mode (Dropout active, a random half of the units dropped): call "
            "model.eval() before the forward passes")
        assert model.training, "the model is still in eval mode after accuracy(): call model.train() at the end"
        assert got is not None, "accuracy() returned None; return the fraction of correct predictions"
        _number(got, what)
        got = float(got)
        if abs(got - want) > 1e-9:
            hint = ""
            if 0 <= got <= 1 and abs(got - want) > 0.02:
                hint = (" Hint: is Dropout still active? Call model.eval() before the forward passes. "
                        "And are all batches counted, including the last short one?")
            elif got > 1:
                hint = " Hint: return a fraction (correct / total), not a count."
            raise AssertionError(f"{what} = {_plain(got)}, expected {want}.{hint}")


@register("3.2", S03, "sgd_momentum", "this is SGD.apply without weight decay and Nesterov.")
def check_sgd_momentum(sgd_momentum):
    from minips.optim import SGD

    rng = np.random.default_rng(32)

    class P:  # a bare parameter for the optimizer
        def __init__(self, a):
            self.data, self.grad, self.shape, self.dtype = a, None, a.shape, a.dtype
    for lr, mu in ((0.1, 0.9), (0.05, 0.5)):
        w0 = rng.standard_normal(6).astype(np.float32)
        ds = [rng.standard_normal(6).astype(np.float32) for _ in range(4)]
        w_ref = w0.copy()
        opt = SGD([P(w_ref)], lr=lr, momentum=mu)
        w, v = w0.copy(), None
        d = np.empty(6, np.float32)   # the gradient buffer: the next backward writes the next gradient into it
        for t, d_t in enumerate(ds):
            opt.apply(0, w_ref, d_t)
            d[...] = d_t
            before = {"w": w.copy(), "d": d.copy(), "v": None if v is None else v.copy()}
            out = sgd_momentum(w, d, v, lr, mu)
            for name, arg in (("w", w), ("d", d), ("v", v)):
                if arg is not None:
                    _unchanged(arg, before[name], name, "sgd_momentum",
                               "Return new arrays (w - lr * v, mu * v + d) and leave w, d and v as they are.")
            assert isinstance(out, (tuple, list)) and len(out) == 2, "sgd_momentum must return a pair (w, v)"
            w, v = out
            what = f"lr {lr}, mu {mu}, step {t + 1}"
            if isinstance(v, np.ndarray) and np.shares_memory(v, d):
                raise AssertionError(
                    f"after step {t + 1} (lr {lr}, mu {mu}) the v you returned is the gradient d itself (the same "
                    "memory): the next backward writes the next gradient into d, and your momentum buffer would "
                    "change with it. Keep a copy on the first step, as SGD does (v = d.copy()).")
            _array(w, f"w ({what})", (6,), kind="f")
            _array(v, f"v ({what})", (6,), kind="f")
            _close(w, w_ref, f"w after step {t + 1} (lr {lr}, mu {mu})", rtol=1e-5, atol=1e-6,
                   hint="Hint: v = mu*v + d (v = d on the first step), then w = w - lr*v." if t else
                   "Hint: on the first step SGD sets v = d, so w = w - lr*d.")
            _close(v, opt.buffers[0], f"v after step {t + 1} (lr {lr}, mu {mu})", rtol=1e-5, atol=1e-6)


# =============================================================================
# Step 4: MPI basics (run under mpiexec -n 2: with one rank, a sum is the input)
# =============================================================================
S04 = "04_mpi_basics"


class _Mismatch(AssertionError):
    """The simulated ranks did not call the same collectives."""


class _SimulatedJob:
    """A job of ``size`` ranks simulated in one process, so a check can run an
    MPI answer at several P without launching them: :meth:`run` calls the
    SAME answer on every simulated rank, each in its own thread with its own
    :class:`_SimulatedComm`, and the collectives meet as real ones do
    (``allreduce`` sums in place what every rank passed, in rank order, in the
    buffer's dtype). Any correct order of operations therefore gives the right
    result here too (divide by ``comm.size`` before or after the sum, allgather
    and average, a nonblocking allreduce and its wait, mpi4py's
    ``comm.mpi.Allreduce``, ...). Ranks that call different collectives, or a
    different number of them, fail with a message saying so instead of hanging."""

    def __init__(self, size: int, timeout: float = 20.0):
        import threading

        self.size, self.timeout = size, timeout
        self.cond = threading.Condition()
        self.calls = [0] * size             # collectives entered (posted), per rank
        self.finished = [False] * size      # the rank's answer has returned (or raised)
        self.slots = {}                     # call index -> {"kind", "data": {rank: value}, "result", ...}

    def post(self, rank: int, kind: str, value, combine) -> int:
        """Rank ``rank`` enters its next collective with ``value`` (a blocking
        one waits in :meth:`complete` next; a nonblocking one returns a request
        at once, as MPI's do). When every rank has posted, ``combine(the values
        in rank order)`` is every rank's result. Returns the call's index."""
        with self.cond:
            k = self.calls[rank]
            self.calls[rank] += 1
            slot = self.slots.setdefault(k, {"kind": kind, "data": {}, "result": None, "done": False, "error": None})
            if slot["kind"] != kind:   # every rank in this collective gets the error
                slot["error"] = _Mismatch(f"simulated rank {rank}'s collective number {k + 1} is {kind}, "
                                          f"another rank's is {slot['kind']}: every rank must call the same "
                                          "collectives in the same order")
                slot["done"] = True
                self.cond.notify_all()
                raise slot["error"]
            slot["data"][rank] = value
            if len(slot["data"]) == self.size:
                try:
                    slot["result"] = combine([slot["data"][r] for r in range(self.size)])
                except _Mismatch as e:   # every rank in this collective gets the error
                    slot["error"] = e
                slot["done"] = True
                self.cond.notify_all()
            return k

    def complete(self, rank: int, k: int, block: bool = True):
        """The result of collective ``k`` for ``rank``: waits for the other
        ranks when ``block``; otherwise returns ``(done, result)`` at once."""
        import time

        with self.cond:
            slot = self.slots[k]
            deadline = time.monotonic() + self.timeout
            while block and not slot["done"]:
                quit = [r for r in range(self.size) if self.finished[r] and self.calls[r] <= k]
                if quit:
                    raise _Mismatch(f"simulated rank {rank} is in {slot['kind']} (its collective number {k + 1}), "
                                    f"but rank {quit[0]} returned after {self.calls[quit[0]]} collective(s): every "
                                    "rank must make the same calls (a collective waits for all ranks)")
                if not self.cond.wait(timeout=max(0.0, deadline - time.monotonic())) and time.monotonic() > deadline:
                    raise _Mismatch(f"simulated rank {rank} waited {self.timeout:.0f} s in {slot['kind']} for the "
                                    "other ranks")
            if slot["error"] is not None:
                raise slot["error"]
            return slot["result"] if block else (slot["done"], slot["result"])

    def collective(self, rank: int, kind: str, value, combine):
        """A blocking collective: :meth:`post`, then :meth:`complete`."""
        return self.complete(rank, self.post(rank, kind, value, combine))

    def run(self, answer, args_per_rank):
        """``[answer(comm_r, *args_per_rank[r]) for each rank r]``, the ranks
        running concurrently. Re-raises the first exception (by rank) of the
        answer; a collective mismatch is reported before other errors it caused;
        a nonblocking request the answer never completed fails the check."""
        import threading

        results, errors = [None] * self.size, [None] * self.size
        comms = [_SimulatedComm(self, r) for r in range(self.size)]

        def one(r):
            try:
                results[r] = answer(comms[r], *args_per_rank[r])
            except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
                errors[r] = e
            finally:
                with self.cond:
                    self.finished[r] = True
                    self.cond.notify_all()

        threads = [threading.Thread(target=one, args=(r,), daemon=True) for r in range(self.size)]
        for t in threads:
            t.start()
        for r, t in enumerate(threads):
            t.join(self.timeout + 5)
            if t.is_alive():
                raise AssertionError(f"your answer did not return on simulated rank {r} of {self.size} within "
                                     f"{self.timeout + 5:.0f} s")
        mismatch = [e for e in errors if isinstance(e, _Mismatch)]
        first = mismatch[0] if mismatch else next((e for e in errors if e is not None), None)
        if first is not None:
            raise first
        for r, c in enumerate(comms):
            open_reqs = [q for q in c._requests if not q.done]
            if open_reqs:
                raise AssertionError(f"on simulated rank {r} of {self.size}, your answer returned with its "
                                     f"{open_reqs[0].kind} still in flight: {_IN_FLIGHT}")
        return results


def _reduce_op(op):
    """The NumPy ufunc of an mpi4py reduction op (None: MPI.SUM, mpi4py's default)."""
    if op is None:
        return np.add
    from mpi4py import MPI   # the answer passed an mpi4py op, so mpi4py is there
    for name, fn in (("SUM", np.add), ("MAX", np.maximum), ("MIN", np.minimum), ("PROD", np.multiply)):
        if op == getattr(MPI, name):
            return fn
    raise AssertionError(f"the check's simulated comm.mpi reduces with MPI.SUM, MAX, MIN or PROD, not {op!r}")


def _buffer_arg(b, what: str) -> np.ndarray:
    """The array of an mpi4py buffer argument (an array, or a list such as ``[array, MPI.FLOAT]``)."""
    if isinstance(b, (list, tuple)) and b:
        b = b[0]
    if not isinstance(b, np.ndarray) or not b.flags.c_contiguous:
        raise TypeError(f"{what}: mpi4py's capitalised calls take contiguous NumPy arrays, got {type(b).__name__}")
    return b


def _reduced(op):
    """A combine function: the elementwise reduction, in rank order, in the buffers' dtype."""
    fn = _reduce_op(op)

    def combine(bufs):
        if len({(b.shape, b.dtype) for b in bufs}) > 1:
            raise _Mismatch(f"the ranks passed allreduce buffers of shapes {[b.shape for b in bufs]} and dtypes "
                            f"{[str(b.dtype) for b in bufs]}: they must all have the same shape and dtype")
        out = bufs[0].copy()
        for b in bufs[1:]:
            fn(out, b, out=out)
        return out
    return combine


class _SimulatedRequest:
    """A nonblocking allreduce of a simulated rank, as minips' Request: the
    buffer is read-only while in flight, and holds the sum once ``wait()``
    (or a ``test()`` that returns True) has completed it."""

    def __init__(self, comm, k: int, buf: np.ndarray, out: np.ndarray, kind: str):
        import time
        self._comm, self._k, self.buf, self._out, self.kind = comm, k, buf, out, kind
        self.done, self.post_time, self.complete_time, self.result = False, time.perf_counter(), None, None
        self._was_writeable = out.flags.writeable
        out.flags.writeable = False      # MPI owns it until the request completes (minips does the same)

    def _finish(self, result):
        import time
        self._out.flags.writeable = self._was_writeable
        self._out[...] = result.reshape(self._out.shape)
        self.done, self.complete_time, self.result = True, time.perf_counter(), self.buf

    def test(self) -> bool:
        if not self.done:
            done, result = self._comm._job.complete(self._comm.rank, self._k, block=False)
            if done:
                self._finish(result)
        return self.done

    def wait(self) -> float:
        if not self.done:
            self._finish(self._comm._job.complete(self._comm.rank, self._k))
        return 0.0

    # mpi4py's spelling (comm.mpi.Iallreduce returns one of these too)
    Test, Wait = test, wait


class _SimulatedMPI:
    """``comm.mpi`` of a simulated rank: the mpi4py communicator calls that
    step 4 shows (``Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)`` and its
    nonblocking ``Iallreduce``, ``allreduce`` / ``allgather`` / ``bcast`` of
    Python objects, ``Bcast``, ``Barrier``, ``Get_rank``, ``Get_size``)."""

    def __init__(self, comm):
        self._c = comm
        self.rank, self.size = comm.rank, comm.size

    def Get_rank(self) -> int:
        return self.rank

    def Get_size(self) -> int:
        return self.size

    def _bufs(self, sendbuf, recvbuf, what):
        recv = _buffer_arg(recvbuf, f"comm.mpi.{what}'s receive buffer")
        send = recv if _is_in_place(sendbuf) else _buffer_arg(sendbuf, f"comm.mpi.{what}'s send buffer")
        if send.size != recv.size:
            raise ValueError(f"comm.mpi.{what}: the send buffer has {send.size} elements, the receive buffer "
                             f"{recv.size}")
        if not recv.flags.writeable:
            raise ValueError(f"comm.mpi.{what}: the receive buffer is read-only")
        return send, recv

    def Allreduce(self, sendbuf, recvbuf, op=None):
        send, recv = self._bufs(sendbuf, recvbuf, "Allreduce")
        recv[...] = self._c._job.collective(self.rank, "comm.mpi.Allreduce", send.copy(),
                                            _reduced(op)).reshape(recv.shape)

    def Iallreduce(self, sendbuf, recvbuf, op=None):
        send, recv = self._bufs(sendbuf, recvbuf, "Iallreduce")
        k = self._c._job.post(self.rank, "comm.mpi.Iallreduce", send.copy(), _reduced(op))
        req = _SimulatedRequest(self._c, k, recv, recv, "comm.mpi.Iallreduce")
        self._c._requests.append(req)
        return req

    def allreduce(self, obj, op=None):
        import functools
        import pickle
        fn = _reduce_op(op)
        out = self._c._job.collective(self.rank, "comm.mpi.allreduce", pickle.dumps(obj),
                                      lambda v: pickle.dumps(functools.reduce(fn, [pickle.loads(b) for b in v])))
        return pickle.loads(out)

    def allgather(self, obj) -> list:
        return self._c.allgather(obj, kind="comm.mpi.allgather")

    def bcast(self, obj, root: int = 0):
        return self._c.bcast_obj(obj, root, kind="comm.mpi.bcast")

    def Bcast(self, buf, root: int = 0):
        b = _buffer_arg(buf, "comm.mpi.Bcast's buffer")
        b[...] = self._c._job.collective(self.rank, "comm.mpi.Bcast", b.copy(), lambda v: v[root])

    def Barrier(self) -> None:
        self._c._job.collective(self.rank, "comm.mpi.Barrier", None, lambda v: None)

    barrier = Barrier

    def __getattr__(self, name):
        raise AssertionError(f"your answer called comm.mpi.{name}; the check's simulated mpi4py communicator offers "
                             "Allreduce, Iallreduce, allreduce, allgather, bcast, Bcast, Barrier, Get_rank and "
                             "Get_size")


def _is_in_place(b) -> bool:
    """Whether ``b`` is mpi4py's ``MPI.IN_PLACE`` (imported only if mpi4py is loaded already)."""
    import sys
    MPI = sys.modules.get("mpi4py.MPI")
    return MPI is not None and b is MPI.IN_PLACE


class _SimulatedComm:
    """Rank ``rank`` of a :class:`_SimulatedJob`: ``size``, ``rank`` and the
    calls of minips' Comm that an answer may use (``allreduce`` with the same
    buffer rules, ``iallreduce`` and its request, ``progress``, ``allgather``,
    ``allreduce_scalar``, ``bcast_obj``, ``barrier``), and ``mpi``, the
    mpi4py communicator's calls (:class:`_SimulatedMPI`)."""

    def __init__(self, job: _SimulatedJob, rank: int):
        self._job, self.size, self.rank = job, job.size, rank
        self._requests = []
        self.mpi = _SimulatedMPI(self)

    @staticmethod
    def _check(buf, what):
        if not isinstance(buf, np.ndarray) or buf.dtype != np.float32 or not buf.flags.c_contiguous:
            raise TypeError(f"{what} buffers must be contiguous float32 numpy arrays "
                            f"(got {type(buf).__name__} {getattr(buf, 'dtype', '')})")
        if not buf.flags.writeable:
            raise RuntimeError(f"{what} on a read-only buffer")

    def allreduce(self, buf) -> float:
        self._check(buf, "allreduce")
        buf[...] = self._job.collective(self.rank, "comm.allreduce", buf.copy(), _reduced(None))
        return 0.0

    def iallreduce(self, buf, lock=(), tag=None):
        self._check(buf, "iallreduce")
        k = self._job.post(self.rank, "comm.iallreduce", buf.copy(), _reduced(None))
        req = _SimulatedRequest(self, k, buf, buf, "comm.iallreduce")
        self._requests.append(req)
        return req

    def progress(self) -> int:
        """Tests every request in flight (as Comm.progress in poll mode); returns how many are still pending."""
        return sum(not q.test() for q in self._requests if not q.done)

    def wait_all(self) -> float:
        for q in self._requests:
            q.wait()
        return 0.0

    def allgather(self, obj, kind: str = "comm.allgather") -> list:
        import pickle
        everyone = self._job.collective(self.rank, kind, pickle.dumps(obj), list)
        return [pickle.loads(b) for b in everyone]   # each rank gets its own copies, as over MPI

    def allreduce_scalar(self, x, op: str = "sum"):
        fn = {"sum": sum, "max": max, "min": min}[op]
        return self._job.collective(self.rank, "comm.allreduce_scalar", x, fn)

    def bcast_obj(self, obj, root: int = 0, kind: str = "comm.bcast_obj"):
        import pickle
        return pickle.loads(self._job.collective(self.rank, kind, pickle.dumps(obj), lambda v: v[root]))

    def barrier(self) -> None:
        self._job.collective(self.rank, "comm.barrier", None, lambda v: None)

    def __getattr__(self, name):
        raise AssertionError(f"your answer called comm.{name}; the check's simulated communicator offers size, rank, "
                             "allreduce (in place, a sum), iallreduce (and the request's wait / test), progress, "
                             "allgather, allreduce_scalar, bcast_obj, barrier and mpi (mpi4py's Allreduce, "
                             "Iallreduce, allgather, bcast, ...), which are all it needs")


class _OneProcessMPI:
    """A one-process Comm (no mpiexec: ``comm.mpi`` is None) whose ``mpi`` answers
    mpi4py's calls as a job of one rank does, so an answer written with
    ``comm.mpi.Allreduce(MPI.IN_PLACE, ...)`` runs in a notebook too; everything
    else is the real Comm's."""

    def __init__(self, comm):
        self._c = comm
        self.mpi = _SimulatedComm(_SimulatedJob(1), 0).mpi

    def __getattr__(self, name):
        return getattr(self._c, name)


def _with_mpi(comm):
    """``comm``, or :class:`_OneProcessMPI` around it when it has no mpi4py communicator."""
    return _OneProcessMPI(comm) if getattr(comm, "mpi", None) is None else comm


def _array(got, what: str, shape, dtype=None, kind: str = "f", writable: bool = False, hint: str = ""):
    """``got`` must be a NumPy array of ``shape`` and ``dtype`` (or of a dtype
    of ``kind``: "f" float, "iu" integer), writable when the next cells write
    into it. Returns it."""
    hint = f" {hint}" if hint else ""
    assert isinstance(got, np.ndarray), (
        f"{what}: got a {type(got).__name__}, expected a NumPy array (np.ndarray).{hint}")
    assert got.shape == tuple(shape), f"{what}: shape {got.shape}, expected {tuple(shape)}.{hint}"
    if dtype is not None:
        assert got.dtype == np.dtype(dtype), (
            f"{what}: dtype {got.dtype}, expected {np.dtype(dtype)} (e.g. .astype(np.{np.dtype(dtype).name})).{hint}")
    else:
        want = "a float" if kind == "f" else "an integer"
        assert got.dtype.kind in kind, f"{what}: dtype {got.dtype}, expected {want} dtype.{hint}"
    if writable:
        assert got.flags.writeable, (
            f"{what} is a read-only array (e.g. a view made by np.broadcast_to): the next cell writes into it. "
            f"Return a new array (np.tile, np.repeat, or .copy() of the view).{hint}")
    return got


def _number(got, what: str, integral: bool = False, hint: str = ""):
    """``got`` must be one real number (a Python or NumPy scalar, or a 0-d
    array), an integer when ``integral``. Returns it."""
    hint = f" {hint}" if hint else ""
    ok = (not isinstance(got, (str, bytes, bool, np.bool_)) and np.ndim(got) == 0
          and np.asarray(got).dtype.kind in ("iu" if integral else "iuf"))
    assert ok, (f"{what}: got {_plain(got)!r} ({type(got).__name__}), expected "
                f"{'an integer' if integral else 'a real number'}.{hint}")
    return got


_IN_FLIGHT = ("the buffer holds the sum only once the request completes. Call req.wait() (or req.test() until it "
              "says True) before using the buffer.")


def _nothing_left_in_flight(comm, pending_before: int, where: str) -> None:
    """The answer must not return with a nonblocking request still in flight on
    ``comm``. Any it left are completed here (cleanup, so that no buffer stays
    locked and no rank waits), AFTER the check has read what the answer returned."""
    left = comm.pending() - pending_before
    if left > 0:
        comm.wait_all()
    assert left <= 0, f"on {where}, your answer returned with a nonblocking allreduce still in flight: {_IN_FLIGHT}"


@register("4.1", S04, "allreduce_mean", "that is the gradient averaging of step 5.", mpi=True)
def check_allreduce_mean(allreduce_mean, comm):
    rng = np.random.default_rng(41 + comm.rank)
    x = (rng.standard_normal(7) * (comm.rank + 1)).astype(np.float32)
    original = x.copy()
    pending = comm.pending()
    got = allreduce_mean(_with_mpi(comm), x)
    got = np.array(got, copy=True) if isinstance(got, np.ndarray) else got   # as returned, before any cleanup
    _nothing_left_in_flight(comm, pending, f"rank {comm.rank}")
    everyone = comm.allgather(original)
    want = np.mean(np.stack(everyone), axis=0)
    assert got is not None, "allreduce_mean returned None; return the mean array"
    assert np.array_equal(x, original), ("allreduce_mean changed its input x; comm.allreduce works in place, "
                                         "so allreduce a copy (x.copy())")
    _array(got, f"allreduce_mean on rank {comm.rank}", x.shape, np.float32)
    _close(got, want, f"mean over {comm.size} ranks (rank {comm.rank})", rtol=1e-5, atol=1e-6,
           hint="Hint: allreduce gives the SUM; divide by comm.size.")
    # the same answer on every rank of simulated jobs of 3 and 5 ranks (in this process)
    for P in (3, 5):
        xs = [(rng.standard_normal(7) * (r + 1)).astype(np.float32) for r in range(P)]
        inputs = [xi.copy() for xi in xs]
        outs = _SimulatedJob(P).run(allreduce_mean, [(xi,) for xi in inputs])
        for r in range(P):
            where = f"on rank {r} of a simulated job of {P} ranks"
            assert outs[r] is not None, f"allreduce_mean returned None {where}; return the mean array"
            assert np.array_equal(inputs[r], xs[r]), f"allreduce_mean changed its input x {where}; use a copy"
            _array(outs[r], f"allreduce_mean {where}", xs[r].shape, np.float32)
            _close(outs[r], np.mean(np.stack(xs), axis=0), f"the mean {where}", rtol=1e-5, atol=1e-6,
                   hint="Hint: divide by comm.size, not by a number: the answer must work on any number of ranks.")


class _SpyRequest:
    """Forwards to a Request, recording whether the answer itself made sure it
    completed: ``wait()``, a ``test()`` that returned True, ``comm.wait_all()``,
    or reading ``req.done`` when it was True (``while not req.done: ...``)."""

    def __init__(self, req):
        self._r, self.completed_by_answer = req, False

    def wait(self, *a, **k):
        out = self._r.wait(*a, **k)
        self.completed_by_answer = True
        return out

    def test(self, *a, **k):
        done = self._r.test(*a, **k)
        self.completed_by_answer |= bool(done)
        return done

    @property
    def done(self):
        self.completed_by_answer |= bool(self._r.done)
        return self._r.done

    def __getattr__(self, name):
        return getattr(self._r, name)


class _SpyComm:
    """Forwards to a Comm, recording when iallreduce was posted, the requests it
    returned, and the progress and blocking calls."""

    def __init__(self, comm):
        self._c, self.posted_at, self.progress_calls, self.blocking_calls = comm, None, 0, 0
        self.requests = []

    def iallreduce(self, buf, *a, **k):
        import time
        self.posted_at = time.perf_counter()
        self.requests.append(_SpyRequest(self._c.iallreduce(buf, *a, **k)))
        return self.requests[-1]

    def allreduce(self, buf, *a, **k):
        self.blocking_calls += 1
        return self._c.allreduce(buf, *a, **k)

    def progress(self):
        self.progress_calls += 1
        return self._c.progress()

    def wait_all(self):
        out = self._c.wait_all()
        for q in self.requests:
            q.completed_by_answer = True
        return out

    def __getattr__(self, name):
        return getattr(self._c, name)


@register("4.2", S04, "overlapped", "posting first, then driving progress, is what the Trainer does every step.",
          mpi=True)
def check_overlapped(overlapped, comm):
    import time

    A = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    starts = []

    def chunk():
        starts.append(time.perf_counter())
        A @ A

    spy = _SpyComm(comm)
    buf = np.full(50_000, comm.rank + 1.0, dtype=np.float32)
    req = overlapped(spy, buf, [chunk] * 5)
    # the state the answer left, read BEFORE the check completes anything itself
    completed = [q.completed_by_answer for q in spy.requests]
    buf_at_return = buf.copy()
    for q in spy.requests:   # keep the ranks in step before failing: nothing may stay in flight
        q._r.wait()
    comm.barrier()
    assert spy.blocking_calls == 0, "use comm.iallreduce (nonblocking), not comm.allreduce"
    assert spy.posted_at is not None, "comm.iallreduce was never called"
    assert len(starts) == 5, f"each chunk must be called once; {len(starts)} calls for 5 chunks"
    assert spy.posted_at <= starts[0], "post the Iallreduce BEFORE the work, so they overlap"
    assert spy.progress_calls >= 4, (f"comm.progress() was called {spy.progress_calls} times during 5 chunks; "
                                     "call it after each chunk so the allreduce advances")
    assert req is not None and hasattr(req, "wait"), "return the Request that comm.iallreduce gave you"
    assert all(completed), (
        "your answer returned without completing its request: call req.wait() (or req.test() until it says True) "
        "before returning. Until then the sum is not guaranteed to be in buf (comm.progress() only lets it advance), "
        "and buf stays read-only.")
    _close(buf_at_return, np.full_like(buf, comm.size * (comm.size + 1) / 2), "the buffer when your answer returned")


# =============================================================================
# Step 5: synchronous SGD
# =============================================================================
S05 = "05_sync_sgd"


def _tiny_problem(comm, seed=0):
    """A small MLP and per-rank synthetic batches (as tests/mpi_worker.py)."""
    r = np.random.default_rng(seed)
    x = r.standard_normal((64 * comm.size, 1, 4, 5)).astype(np.float32)
    y = (x.reshape(len(x), -1) @ r.standard_normal((20, 4))).argmax(1).astype(np.int64)
    return [(x[i::comm.size][:16], y[i::comm.size][:16]) for i in range(comm.size)]


def _grad_holds_mean(grad, mine, everyone, what):
    """``grad``, the buffer a sync step was given, must hold the mean over ranks
    afterwards, as SyncSGD.step leaves it (the exercise says: in place)."""
    P = len(everyone)
    mean = np.mean(np.stack(everyone), axis=0)
    if np.allclose(grad, mean, rtol=1e-5, atol=1e-6):
        return
    if P > 1 and np.allclose(grad, np.sum(np.stack(everyone), axis=0), rtol=1e-5, atol=1e-6):
        held = f"the SUM over the {P} ranks"
    elif P > 1 and np.array_equal(grad, mine):
        held = "this rank's own gradient, unchanged"
    else:
        held = "neither the mean nor the sum over ranks"
    raise AssertionError(
        f"{what} holds {held}: average it in place (divide grad itself by comm.size), as SyncSGD.step does. Every "
        "parameter's .grad is a view into this buffer, and what reads the gradients after the step (a gradient "
        "norm, clipping, a test) must find the average, the same on every rank.")


@register("5.1", S05, "sync_step", "that is SyncSGD.step.", mpi=True)
def check_sync_step(sync_step, comm):
    import minips as mp
    from minips.distributed.algorithms import make_algorithm
    from minips.models import MLP
    from minips.optim import SGD

    batches = _tiny_problem(comm)
    student_comm = _with_mpi(comm)
    grad_failure = None
    runs = []
    for use_student in (False, True):
        mp.random.seed(5)
        model = MLP(20, (16,), 4)
        opt = SGD(model.parameters(), lr=0.1, momentum=0.9)
        algo = make_algorithm("sync", model.parameters(), opt, comm)
        algo.start()
        try:
            for t in range(4):
                x, y = batches[comm.rank]
                batch = (x[4 * t:4 * t + 4], y[4 * t:4 * t + 4])
                loss = model.loss(batch)
                algo.before_backward()
                loss.backward()
                if use_student:
                    g = algo.flat.grads[0]
                    mine = g.copy()
                    everyone = comm.allgather(mine)
                    pending = comm.pending()
                    sync_step(student_comm, g, algo.flat.weights, opt)
                    _nothing_left_in_flight(comm, pending, f"rank {comm.rank}, step {t + 1}")
                    try:   # reported after the weights: a wrong update is the first thing to fix
                        _grad_holds_mean(g, mine, everyone, f"rank {comm.rank}'s grad after step {t + 1} of your "
                                         "sync_step")
                    except AssertionError as e:
                        grad_failure = grad_failure or e
                else:
                    algo.step()
        finally:
            algo.finish()
        runs.append(algo.flat.weights.copy())
    replicas = comm.allgather(runs[1])
    _close(runs[1], runs[0], f"weights after 4 steps of your sync_step (rank {comm.rank})", rtol=1e-6, atol=1e-7,
           hint="Hint: comm.allreduce(grad) sums in place; divide by comm.size; then "
                "optimizer.apply(0, weights, grad).")
    for r, w in enumerate(replicas):
        _close(w, replicas[0], f"rank {r}'s weights vs rank 0's (replicas must stay identical)")
    if grad_failure is not None:
        raise grad_failure
    # the same answer on every rank of simulated jobs of 3 and 4 ranks (in this process): two steps of SGD with
    # momentum 0.9 from the same weights, each rank its own gradients; replicas must stay identical
    rng = np.random.default_rng(51)
    for P in (3, 4):
        w0 = rng.standard_normal(6).astype(np.float32)
        grads = [[rng.standard_normal(6).astype(np.float32) for _ in range(P)] for _ in range(2)]
        ws = [w0.copy() for _ in range(P)]
        opts = [SGD([mp.nn.Parameter(w0.copy())], lr=0.1, momentum=0.9) for _ in range(P)]
        ref_w, ref_opt = w0.copy(), SGD([mp.nn.Parameter(w0.copy())], lr=0.1, momentum=0.9)
        for t in range(2):
            bufs = [grads[t][r].copy() for r in range(P)]
            _SimulatedJob(P).run(sync_step, [(bufs[r], ws[r], opts[r]) for r in range(P)])
            ref_opt.apply(0, ref_w, np.mean(np.stack(grads[t]), axis=0).astype(np.float32))
            for r in range(P):
                _close(ws[r], ref_w, f"weights after step {t + 1} on rank {r} of a simulated job of {P} ranks "
                       "(SGD, lr 0.1, momentum 0.9)", rtol=1e-5, atol=1e-6,
                       hint="Hint: divide by comm.size, not by a number: the answer must work on any number of "
                            "ranks.")
            assert all(np.array_equal(w, ws[0]) for w in ws), (
                f"after step {t + 1} of a simulated job of {P} ranks the replicas differ: every rank must apply the "
                "same averaged gradient")
            for r in range(P):
                _grad_holds_mean(bufs[r], grads[t][r], grads[t],
                                 f"grad on rank {r} of a simulated job of {P} ranks after step {t + 1}")


@register("5.2", S05, "ring_allreduce_seconds", "this is minips.distributed.costmodel.ring_allreduce_time.")
def check_ring_allreduce_seconds(ring_allreduce_seconds):
    from minips.distributed.costmodel import ring_allreduce_time

    for nbytes, P, alpha, beta in [(1e6, 2, 5e-5, 8e-9), (4e6, 8, 1e-6, 1e-10), (8, 64, 1e-5, 1e-9),
                                   (1e6, 1, 5e-5, 8e-9), (3e7, 1024, 2e-6, 4e-11)]:
        got = ring_allreduce_seconds(nbytes, P, alpha, beta)
        want = ring_allreduce_time(nbytes, P, alpha, beta)
        assert got is not None, "ring_allreduce_seconds returned None; return the time in seconds"
        _number(got, f"ring_allreduce_seconds({nbytes:g}, P={P}, alpha={alpha:g}, beta={beta:g})")
        assert abs(got - want) <= 1e-12 + 1e-9 * want, (
            f"ring_allreduce_seconds({nbytes:g}, P={P}, alpha={alpha:g}, beta={beta:g}) = {_plain(got)}, expected "
            f"{want:.6g}. Hint: 2(P-1) latencies and 2(P-1)/P * n bytes per rank (reduce-scatter + allgather); "
            "0 for P = 1.")


# =============================================================================
# Step 6: overlap and buckets
# =============================================================================
S06 = "06_overlap_buckets"


@register("6.1", S06, "bucket_plan",
          "that is minips.distributed.flat.bucket_groups, which FlatParams builds its buckets from.")
def check_bucket_plan(bucket_plan):
    import minips as mp
    from minips.distributed.flat import FlatParams
    from minips.models import ConvNet

    cases = [([100, 10, 300, 5], 0.0), ([100, 10, 300, 5], 1e-6), ([2**18, 3, 2**18, 7, 2**16], 1.0),
             ([256] * 4, 2048 / 2**20),  # two parameters fill a bucket exactly: it closes there
             ([2**18] * 3, 1.0),         # each parameter is exactly 1 MiB
             ([1000] * 7, 0.008), ([p.size for p in ConvNet().parameters()], 0.05),
             ([p.size for p in ConvNet().parameters()], 0.25)]
    for sizes, mb in cases:
        params = [mp.nn.Parameter(np.zeros(n, np.float32)) for n in sizes]
        want = [list(b.param_ids) for b in FlatParams(params, 1, mb).buckets]
        arg = list(sizes)
        got = bucket_plan(arg, mb)
        assert arg == list(sizes), (
            f"bucket_plan changed its argument sizes in place (it was {list(sizes)}, is now {arg}): the caller's list "
            "is not yours to change. Walk it backwards without reordering it (reversed(range(len(sizes))), or "
            "sizes[::-1], a new list), not sizes.reverse().")
        assert got is not None, "bucket_plan returned None"
        for b in got:
            for i in b:
                _number(i, f"bucket_plan({sizes}, {mb}): an entry of bucket {_plain(b)}", integral=True,
                        hint="Each bucket lists parameter indices (ints).")
        got = [list(map(int, b)) for b in got]
        assert got == want, (f"bucket_plan({sizes}, {mb}) = {got}, expected {want}. Hint: walk the parameters "
                             "from the LAST to the first; close a bucket as soon as its bytes reach "
                             "bucket_mb * 2**20; bucket_mb = 0 means everything in one bucket.")


@register("6.2", S06, "gradient_ready_order")
def check_gradient_ready_order(gradient_ready_order):
    import minips as mp
    from minips.models import MLP, ConvNet

    rng = np.random.default_rng(62)
    for make, shape in ((lambda: MLP(20, (8, 6), 3), (4, 1, 4, 5)), (lambda: ConvNet(1, (8, 8), 3, widths=(2, 3),
                                                                                          hidden=5), (4, 1, 8, 8))):
        mp.random.seed(0)
        model = make()
        batch = (rng.standard_normal(shape).astype(np.float32), rng.integers(0, 3, 4))
        order = []
        hs = [p.register_grad_hook(lambda t, n=n: order.append(n)) for n, p in model.named_parameters()]
        model.loss(batch).backward()
        for h in hs:
            h.remove()
        model.zero_grad()
        got = gradient_ready_order(model, batch)
        assert got is not None, "gradient_ready_order returned None; return the list of names"
        assert list(got) == order, f"order {_plain(list(got))}, expected {order}"
        leftover = [n for n, p in model.named_parameters() if p._hooks]
        assert not leftover, f"hooks are still registered on {leftover}: remove them with handle.remove()"


# =============================================================================
# Step 7: pseudo-synchronous SGD
# =============================================================================
S07 = "07_pseudo_sync"


@register("7.1", S07, "stale_sgd", "that is the rule of PseudoSyncSGD.step with the `last` predictor.")
def check_stale_sgd(stale_sgd):
    from minips.labs.staleness import LeastSquares, simulate_stale_sgd

    problem = LeastSquares(d=20, m=200, cond=50.0, rotate=True, seed=3)
    rng = np.random.default_rng(71)
    batches = [rng.integers(0, problem.m, 8) for _ in range(30)]

    def grad_fn(w, t):
        return problem.grad(np.asarray(w, np.float32), batches[t])

    w0 = np.zeros(problem.d, np.float32)
    for k in (1, 2, 3):
        want = simulate_stale_sgd(grad_fn, w0, "last", staleness=k, lr=0.1, momentum=0.9, steps=30)["w"]
        got = stale_sgd(grad_fn, w0.copy() if k > 1 else w0, k, 0.1, 0.9, 30)
        assert np.all(w0 == 0), "stale_sgd modified w0: copy it first"
        assert got is not None, "stale_sgd returned None; return the final weights"
        _array(got, f"stale_sgd's weights with k = {k}", w0.shape, kind="f")
        _close(got, want, f"weights after 30 steps with k = {k}", rtol=1e-4, atol=1e-6,
               hint="Hint: at step t, g_t goes in flight first; then, only if more than k are in flight, "
                    "pop the OLDEST and apply it; steps 0..k-1 do not update.")


@register("7.2", S07, "predicted_step_time", "overlap turns a sum into a maximum.")
def check_predicted_step_time(predicted_step_time):
    for tc, tm in [(0.1, 0.02), (0.01, 0.05), (0.03, 0.03), (0.2, 0.0)]:
        for algo, want in (("sync", tc + tm), ("pseudo-sync", max(tc, tm))):
            got = predicted_step_time(tc, tm, algo)
            assert got is not None, "predicted_step_time returned None; return the step time in seconds"
            _number(got, f"predicted_step_time({tc}, {tm}, {algo!r})")
            assert abs(got - want) < 1e-12, (
                f"predicted_step_time({tc}, {tm}, {algo!r}) = {_plain(got)}, expected {want}. "
                + ("Hint: sync waits for the whole allreduce after the compute." if algo == "sync" else
                   "Hint: with k = 1, each allreduce has one step of compute to finish under; the step lasts "
                   "as long as the slower of the two."))


# =============================================================================
# Step 8: predictors
# =============================================================================
S08 = "08_predictors"


def _compare_predictor(mine, ref, what, hint):
    """Feed ``mine`` and the reference the same 8 arrivals, as pseudo-sync does:
    ``G`` arrives in a buffer that is reused once consumed (the next arrival is
    written into it) and ``w_now`` is the live weight buffer (the optimizer
    updates it in place). A predictor must neither write into its arguments
    (``Predictor.predict`` promises G is not modified) nor keep them."""
    rng = np.random.default_rng(81)
    n = 6
    w = np.zeros(n, np.float32)          # the live weights
    G = np.empty(n, np.float32)          # the arrival buffer, reused
    cls = type(mine).__name__
    outs_mine, outs_ref = [], []
    for t in range(8):
        G[...] = rng.standard_normal(n) + 0.3 * t
        w_then = w.copy()
        w -= np.float32(0.1) * G
        before = {"G": G.copy(), "w_now": w.copy(), "w_then": w_then.copy()}
        d = mine.predict(G, w, w_then)
        for name, arg in (("G", G), ("w_now", w), ("w_then", w_then)):
            _unchanged(arg, before[name], name, f"{cls}.forecast (arrival {t})",
                       "Keep your state in arrays of your own: self.S = G.copy() at the first arrival, then new "
                       "arrays (self.S = alpha * G + (1 - alpha) * self.S), or in-place updates of YOUR copy only. "
                       "Predictor.predict promises the caller that G is not modified.")
        for attr, v in vars(mine).items():
            for name, arg in (("G", G), ("w_now", w), ("w_then", w_then)):
                if isinstance(v, np.ndarray) and np.shares_memory(v, arg):
                    raise AssertionError(
                        f"{cls} keeps {name} itself in self.{attr} (the same memory, after arrival {t}): the caller "
                        f"reuses that buffer (the next arrival is written into G's, the optimizer updates w_now's), "
                        f"so self.{attr} would change behind your back (and an in-place update of self.{attr} "
                        f"would write into the caller's {name}). Keep a copy ({name}.copy()).")
        if isinstance(d, np.ndarray) and np.shares_memory(d, G):
            raise AssertionError(f"{cls}.forecast returned G itself (the same memory) at arrival {t}: the caller "
                                 "reuses G's buffer for the next arrival; return a new array")
        outs_mine.append(d)
        outs_ref.append(ref.predict(before["G"].copy(), before["w_now"].copy(), before["w_then"].copy()))
    for t, (a, b) in enumerate(zip(outs_mine, outs_ref)):
        assert a is not None, f"{what}.forecast returned None"
        _array(a, f"{what} forecast at arrival {t}", (n,), np.float32,
               hint="The optimizer and the predictor's bookkeeping take float32 (.astype(np.float32)).")
        _close(a, b, f"{what} forecast at arrival {t} (compared after all 8 arrivals)", rtol=1e-5, atol=1e-6,
               hint=hint)


@register("8.1", S08, "MyEMA")
def check_my_ema(MyEMA):
    from minips.distributed.algorithms.predictors import EMAPredictor

    for alpha in (0.5, 0.2):
        _compare_predictor(MyEMA(2, alpha=alpha), EMAPredictor(2, alpha=alpha), f"MyEMA(alpha={alpha})",
                           "Hint: S = G at the first arrival, then S = alpha*G + (1-alpha)*S; return a COPY "
                           "(an array you later change in place would change the forecasts already returned).")


@register("8.2", S08, "MyHolt")
def check_my_holt(MyHolt):
    from minips.distributed.algorithms.predictors import HoltPredictor

    for k, alpha, beta in ((2, 0.5, 0.1), (1, 0.3, 0.4)):
        _compare_predictor(MyHolt(k, alpha=alpha, beta=beta), HoltPredictor(k, alpha=alpha, beta=beta),
                           f"MyHolt(k={k}, alpha={alpha}, beta={beta})",
                           "Hint: first arrival: L = G, B = 0. Then the new level uses the OLD L and B; the trend "
                           "uses the new minus the old level; forecast L + k*B.")


# =============================================================================
# Step 9: video captioning
# =============================================================================
S09 = "09_video_captioning"


@register("9.1", S09, "encode_caption", "that is Vocab.encode.")
def check_encode_caption(encode_caption):
    from minips.data.moving_fmnist import VOCAB

    for text, length in (("a sneaker moves up", 11), ("a bag moves down-left and a coat moves right", 11),
                         ("a zebra moves up", 8), ("a dress moves left", 6)):
        got = encode_caption(text, length)
        want = VOCAB.encode(text, length)
        assert got is not None, "encode_caption returned None"
        _array(got, f"encode_caption({text!r}, {length})", (length,), np.int64,
               hint="Token ids are int64: np.array(ids, dtype=np.int64).")
        assert np.array_equal(got, want), (
            f"encode_caption({text!r}, {length}) = {got.tolist()}, expected {want.tolist()} "
            f"({VOCAB.decode(want)!r}). Hint: <bos> first, <eos> after the last word, <pad> to the length; "
            "unknown words are <unk>.")


@register("9.2", S09, "masked_cross_entropy", "that is nn.sequence_cross_entropy, which VideoCaptioner.loss uses.")
def check_masked_cross_entropy(masked_cross_entropy):
    import minips as mp
    from minips import nn

    rng = np.random.default_rng(92)
    for L, N, V, pad in ((5, 3, 7, 0), (10, 4, 25, 0), (3, 2, 4, 3)):
        logits = (rng.standard_normal((L, N, V)) * 3).astype(np.float64)
        logits[0, 0, 0] = 800.0    # exp(800) overflows: the log-softmax must subtract the maximum
        targets = rng.integers(0, V, (L, N))
        targets[-2:, 0] = pad      # padding at the end of a sequence
        if not (targets != pad).any():
            targets[0, 0] = (pad + 1) % V
        want = nn.sequence_cross_entropy(mp.tensor(logits), targets, pad_id=pad).item()
        args = (logits.copy(), targets.copy())
        with np.errstate(over="ignore", invalid="ignore"):
            got = masked_cross_entropy(*args, pad)
        for name, arg, before in (("logits", args[0], logits), ("targets", args[1], targets)):
            _unchanged(arg, before, name, "masked_cross_entropy",
                       "The step passes the model's own output (logits.data): subtract the maximum into a new array "
                       "(z = logits - logits.max(axis=-1, keepdims=True)), not with logits -= ...")
        assert got is not None, "masked_cross_entropy returned None; return the mean loss (a float)"
        _number(got, f"masked_cross_entropy (L={L}, N={N}, V={V})")
        assert np.isfinite(float(got)), (
            f"masked_cross_entropy returned {_plain(got)}; with a logit of 800 the naive exp overflows: subtract the "
            "maximum over V before exponentiating")
        assert abs(float(got) - want) <= 1e-6 * max(1.0, abs(want)), (
            f"masked_cross_entropy = {float(got):.6f}, expected {want:.6f} (L={L}, N={N}, V={V}, pad_id={pad}). "
            "Hint: average over the positions where targets != pad_id only, not over all L*N.")


# =============================================================================
# Step 10: scaling and the cost model
# =============================================================================
S10 = "10_scaling_and_clusters"


@register("10.1", S10, "fit_alpha_beta", "that is minips.distributed.costmodel.fit_ring_allreduce.")
def check_fit_alpha_beta(fit_alpha_beta):
    from minips.distributed.costmodel import fit_ring_allreduce, ring_allreduce_time

    rng = np.random.default_rng(101)
    for P, alpha, beta in ((2, 5e-6, 2e-10), (8, 5e-5, 8e-9)):
        n = np.array([2.0**k for k in range(3, 25, 2)])
        t = np.array([ring_allreduce_time(v, P, alpha, beta) for v in n]) * rng.uniform(0.8, 1.3, len(n))
        want = fit_ring_allreduce(n, t, P).model
        got = fit_alpha_beta(list(n), list(t), P)
        assert got is not None and len(got) == 2, "fit_alpha_beta must return (alpha, beta)"
        for name, v in zip(("alpha", "beta"), got):
            _number(v, f"fit_alpha_beta's {name} (P = {P})")
        a, b = (float(v) for v in got)
        ok = abs(a - want.alpha) <= 1e-6 * want.alpha + 1e-15 and abs(b - want.beta) <= 1e-6 * want.beta + 1e-20
        assert ok, (f"P = {P}: got alpha {a:.6g}, beta {b:.6g}; expected alpha {want.alpha:.6g}, beta "
                    f"{want.beta:.6g}. Hint: columns 2(P-1) and 2(P-1)/P*n; divide every row and the target "
                    "by the measured time (relative errors); clip negatives to 0.")
    # a case where the unconstrained fit gives a negative latency
    n = np.array([1e3, 1e5, 1e7])
    t = np.array([1e-6, 1e-4, 1e-2]) * np.array([1.0, 1.5, 1.0])
    got = fit_alpha_beta(list(n), list(t), 2)
    assert got is not None and len(got) == 2, "fit_alpha_beta must return (alpha, beta)"
    for name, v in zip(("alpha", "beta"), got):
        _number(v, f"fit_alpha_beta's {name} (P = 2)")
    a, b = (float(v) for v in got)
    want = fit_ring_allreduce(n, t, 2).model
    assert a >= 0 and b >= 0, "clip negative estimates to 0 (a latency or a time per byte cannot be negative)"
    assert abs(a - want.alpha) <= 1e-9 and abs(b - want.beta) <= 1e-6 * want.beta + 1e-20, (
        f"got ({a:.6g}, {b:.6g}), expected ({want.alpha:.6g}, {want.beta:.6g})")


@register("10.2", S10, "weak_scaling_efficiency")
def check_weak_scaling_efficiency(weak_scaling_efficiency):
    from minips.distributed.costmodel import ring_allreduce_time

    for tc, n, P, a, b in [(0.06, 1.7e6, 2, 5e-5, 8e-9), (0.06, 1.7e6, 64, 5e-5, 8e-9), (0.01, 1e8, 256, 1e-6, 1e-10),
                           (0.2, 4e5, 1, 5e-5, 8e-9), (0.005, 1.7e6, 1024, 5e-5, 8e-9)]:
        T = ring_allreduce_time(n, P, a, b)
        for algo, want in (("sync", tc / (tc + T)), ("pseudo-sync", tc / max(tc, T))):
            got = weak_scaling_efficiency(tc, n, P, a, b, algo)
            assert got is not None, "weak_scaling_efficiency returned None; return the efficiency (a float)"
            _number(got, f"weak_scaling_efficiency(t_c={tc}, n={n:g}, P={P}, {algo!r})")
            assert abs(got - want) < 1e-9, (
                f"weak_scaling_efficiency(t_c={tc}, n={n:g}, P={P}, {algo!r}) = {_plain(got)}, expected {want:.6g}. "
                "Hint: efficiency = t_c / (model step time at P); sync: t_c + T, pseudo-sync: max(t_c, T).")


@register("10.3", S10, "time_to_target", "the study's time_to_accuracy cells read each seed's curve this way "
          "(minips/bench/study/timeaxis.py).")
def check_time_to_target(time_to_target):
    curve = [(13, 0.50), (26, 0.70), (39, 0.69), (52, 0.80)]
    for target, want, why in ((0.70, 26 * 0.02, "an evaluation AT the target reaches it (>=)"),
                              (0.75, 52 * 0.02, "the first evaluation at or above the target"),
                              (0.695, 26 * 0.02, "the FIRST crossing counts, even if the curve drops below again"),
                              (0.40, 13 * 0.02, "the first evaluation may already be above the target"),
                              (0.90, None, "never reached: return None (not 0, not infinity)")):
        before = list(curve)
        got = time_to_target(curve, 0.02, target)
        assert curve == before, "time_to_target changed the caller's curve; read it, do not sort or edit it"
        if want is None:
            assert got is None, f"time_to_target({curve}, 0.02, {target}) = {_plain(got)}, expected None: {why}"
            continue
        assert got is not None, f"time_to_target({curve}, 0.02, {target}) returned None, expected {want:.4g} s: {why}"
        _number(got, f"time_to_target(curve, 0.02, {target})")
        assert abs(float(got) - want) < 1e-9, (
            f"time_to_target({curve}, 0.02, {target}) = {_plain(got)}, expected {want:.4g} s ({why}). Hint: "
            "seconds = step x step_time_s, not the step itself nor the index of the evaluation.")
    assert time_to_target([], 0.02, 0.5) is None, "an empty curve (a diverged run) never reaches the target: None"
    got = time_to_target([(10, 0.3), (20, 0.9)], 0.5, 0.8)
    assert got is not None and abs(float(got) - 10.0) < 1e-9, (
        f"time_to_target([(10, 0.3), (20, 0.9)], 0.5, 0.8) = {_plain(got)}, expected 10 s (step 20 x 0.5 s)")


# =============================================================================
# Step 11: local SGD
# =============================================================================
S11 = "11_local_sgd"


@register("11.1", S11, "average_models", "that is what Algorithm.average_model leaves on every rank.")
def check_average_models(average_models):
    rng = np.random.default_rng(111)
    for P, d in ((3, 5), (5, 4), (2, 7), (1, 3), (8, 20)):   # several P (no hard-coded number of ranks); 8 x 20
        W = rng.standard_normal((P, d))                      # as in the step's simulation
        before = W.copy()
        got = average_models(W)
        assert got is not None, "average_models returned None; return the (P, d) array"
        assert np.array_equal(W, before), "average_models modified W: build a new array"
        assert isinstance(got, np.ndarray) and got.shape == (P, d), (
            f"with P = {P}, d = {d}: got {type(got).__name__} of shape {np.shape(got)}, expected an array of shape "
            f"{(P, d)}. Hint: every rank keeps a copy of the average: P rows, not one.")
        _array(got, f"average_models of a {P} x {d} float64 W", (P, d), W.dtype, writable=True,
               hint="The simulation below keeps stepping each row (W[i] -= ...).")
        want = np.tile(before.sum(axis=0) / P, (P, 1))
        # a tolerance: W.mean(0), W.sum(0) / P, (W / P).sum(0) and a product with a matrix of 1/P differ in the last bit
        _close(got, want, f"the averaged weights with P = {P}", rtol=1e-10, atol=1e-12,
               hint="Hint: the mean over ranks is over axis 0 (the rows), divided by the number of rows.")
        assert not np.shares_memory(got, W), (
            f"with P = {P}: what average_models returned shares memory with W, the caller's array: return a new array")
        # each rank's row is its own: a step on one rank must not move the others (told by memory, not by values)
        shared = [i for i in range(1, P) if np.shares_memory(got[0], got[i])]
        assert not shared, (f"with P = {P}: rows 0 and {shared[0]} of what average_models returned are the same "
                            f"memory (strides {got.strides}: a stride-0 view, as np.broadcast_to and as_strided make), "
                            "so a step on one rank would move the others. Return a new array with its own rows "
                            "(np.tile, np.repeat, or .copy() of the view).")


@register("11.2", S11, "stl_stages", "that is the schedule STLSGD.step walks through.")
def check_stl_stages(stl_stages):
    import math

    def expected(t1, k1, n, data):
        out, k = [], float(k1)
        for s in range(n):
            out.append((t1 * 2**s, max(1, round(k)), 0.5**s))
            k *= 2.0 if data == "iid" else math.sqrt(2.0)
        return out

    for t1, k1, n, data in ((200, 2, 5, "iid"), (200, 2, 5, "non-iid"), (100, 1, 7, "non-iid"), (50, 3, 6, "non-iid"),
                            (10, 1, 4, "iid")):
        got = stl_stages(t1, k1, n, data)
        want = expected(t1, k1, n, data)
        assert got is not None, "stl_stages returned None; return a list of tuples"
        got = [tuple(x) for x in got]
        assert len(got) == n, f"stl_stages({t1}, {k1}, {n}, {data!r}) has {len(got)} stages, expected {n}"
        for s, g in enumerate(got):
            assert len(g) == 3, f"stage {s} of stl_stages({t1}, {k1}, {n}, {data!r}) is {_plain(g)}: give 3 values"
            _number(g[0], f"stage {s}'s length", integral=True, hint="Lengths are whole steps (ints).")
            _number(g[1], f"stage {s}'s period", integral=True, hint="Periods are whole steps (round() gives an int).")
            _number(g[2], f"stage {s}'s lr factor")
        for s, (g, w) in enumerate(zip(got, want)):
            assert int(g[0]) == w[0], (f"stage {s} of stl_stages({t1}, {k1}, {n}, {data!r}): length {g[0]}, "
                                       f"expected {w[0]}. Hint: each stage is twice as long as the previous.")
            assert int(g[1]) == w[1], (
                f"stage {s} of stl_stages({t1}, {k1}, {n}, {data!r}): period {g[1]}, expected {w[1]}. Hint: "
                + ("iid data doubles the period each stage." if data == "iid" else
                   "non-iid data multiplies the UNROUNDED period by sqrt(2) each stage and rounds only what it "
                   "returns (1, 1.41 -> 1, 2, 2.83 -> 3, ...)."))
            assert abs(float(g[2]) - w[2]) < 1e-12, (f"stage {s}: lr factor {g[2]}, expected {w[2]}. Hint: the "
                                                     "learning rate halves each stage.")
    got = [tuple(x) for x in stl_stages(200, 2, 4)]       # data left out: iid, as the skeleton's default
    assert [(int(a), int(b)) for a, b, _ in got] == [(200, 2), (400, 4), (800, 8), (1600, 16)], (
        f"stl_stages(200, 2, 4) without data = {_plain(got)}: the default is data='iid'")


# =============================================================================
# Step 12: gossip
# =============================================================================
S12 = "12_gossip"


def _ring_metropolis(P: int) -> np.ndarray:
    """The ring's Metropolis-Hastings W written out by hand (independent of minips):
    P = 2: one edge, degree 1, every entry 1/2; P >= 3: 1/3 on i-1, i, i+1 (mod P)."""
    if P == 2:
        return np.full((2, 2), 0.5)
    W = np.zeros((P, P))
    for i in range(P):
        for j in (i - 1, i, i + 1):
            W[i, j % P] = 1.0 / 3.0
    return W


@register("12.1", S12, "ring_mixing_matrix", "that is minips.distributed.topology.ring(P).W.")
def check_ring_mixing_matrix(ring_mixing_matrix):
    for P in (5, 8, 3, 4, 2, 16, 32, 64):   # every P the step uses (2, 3, 8, 16, 32, 64) and more
        got = ring_mixing_matrix(P)
        assert got is not None, "ring_mixing_matrix returned None; return the (P, P) array W"
        W = _array(got, f"ring_mixing_matrix({P})", (P, P), np.float64,
                   hint="The next cells call W.sum(axis=1) and np.linalg.eigvalsh(W): build it with np.zeros((P, P)).")
        assert np.all(np.isfinite(W)) and np.all(W >= 0), (
            f"ring_mixing_matrix({P}) has negative or non-finite entries: weights are shares, in [0, 1]")
        rows, cols = W.sum(axis=1), W.sum(axis=0)
        i = int(np.argmax(np.abs(rows - 1)))
        assert abs(rows[i] - 1) < 1e-9, (
            f"with P = {P}, row {i} of W sums to {rows[i]:.6g} (self weight W[{i}, {i}] = {W[i, i]:.6g}): every "
            "row must sum to 1, or a mixing step does not keep a constant vector constant. Hint: the self weight "
            "is 1 minus the neighbours' weights" + (", and with P = 2 rank i-1 and rank i+1 are the same rank."
                                                   if P == 2 else "."))
        j = int(np.argmax(np.abs(cols - 1)))
        assert abs(cols[j] - 1) < 1e-9, (
            f"with P = {P}, column {j} of W sums to {cols[j]:.6g}: the rows sum to 1 but the columns do not, so "
            "gossip would not keep the mean (sum_i x_i changes). Hint: W must be doubly stochastic; is every "
            "edge there in both directions, with the same weight?")
        a, b = np.unravel_index(np.argmax(np.abs(W - W.T)), W.shape)
        assert np.allclose(W, W.T, atol=1e-12), (
            f"with P = {P}, W is not symmetric: W[{a}, {b}] = {W[a, b]:.6g} but W[{b}, {a}] = {W[b, a]:.6g}. "
            "Hint: Metropolis-Hastings gives an edge the same weight in both directions.")
        for i in range(P):
            for j in range(P):
                if (j - i) % P not in (0, 1, P - 1):
                    assert W[i, j] == 0, (
                        f"with P = {P}, W[{i}, {j}] = {W[i, j]:.6g}, but ranks {i} and {j} are not neighbours on "
                        "a ring (rank i talks to i-1 and i+1 only)")
        if P >= 3:
            assert W[0, P - 1] > 0 and W[P - 1, 0] > 0, (
                f"with P = {P}, W[0, {P - 1}] = {W[0, P - 1]:.6g}: ranks 0 and {P - 1} are neighbours on a ring "
                "(the wrap-around edge, i - 1 and i + 1 taken mod P); without it the graph is a path")
        _close(W, _ring_metropolis(P), f"ring_mixing_matrix({P})", rtol=1e-9, atol=1e-12,
               hint=("Hint: with P = 2 both neighbours are the same rank: ONE edge, degree 1, so "
                     "Metropolis-Hastings gives 1 / (1 + max(1, 1)) = 1/2 to the neighbour and 1/2 to itself."
                     if P == 2 else "Hint: on a ring of P >= 3 every rank has degree 2: weights 1 / (1 + 2) = 1/3 "
                                    "to each neighbour and 1/3 to itself."))


def _push_matrix(n: int, out_neighbors) -> np.ndarray:
    """Push-sum's column-stochastic A by hand (independent of minips): node i keeps and
    sends 1 / (k_i + 1) of its pair, k_i its out-degree; new (x, w) = A (x, w)."""
    A = np.zeros((n, n))
    for i in range(n):
        share = 1.0 / (len(out_neighbors[i]) + 1)
        A[i, i] += share
        for j in out_neighbors[i]:
            A[int(j), i] += share
    return A


@register("12.2", S12, "push_sum_step", "that is the round of minips.averaging.push_sum.PushSum.step.")
def check_push_sum_step(push_sum_step):
    from minips.averaging.engines import VectorisedCluster
    from minips.distributed.topology import make_topology
    from minips.averaging.push_sum import PushSum

    rng = np.random.default_rng(122)
    uneven = [[1, 2, 3], [2], [0], [0, 2]]   # out-degrees 3, 1, 1, 2: strongly connected, directed
    cases = [("a directed graph with out-degrees 3, 1, 1, 2", uneven),
             ("a directed ring of 5", [[(i + 1) % 5] for i in range(5)]),
             ("an undirected ring of 6", [[(i - 1) % 6, (i + 1) % 6] for i in range(6)])]
    for what, nbrs in cases:
        n = len(nbrs)
        d = 1 if "ring of 6" in what else 3    # one value per node, as the step's own runs
        x = rng.standard_normal((n, d))
        w = rng.uniform(0.5, 2.0, n)         # weights other than 1, as after a few rounds
        x_in, w_in, nbrs_in = x.copy(), w.copy(), [list(o) for o in nbrs]
        got = push_sum_step(x, w, nbrs)
        assert got is not None and len(got) == 2, "push_sum_step must return the pair (x, w)"
        assert np.array_equal(x, x_in) and np.array_equal(w, w_in), \
            "push_sum_step modified its inputs x or w: build new arrays"
        assert [list(o) for o in nbrs] == nbrs_in, (
            f"on {what}: push_sum_step changed out_neighbors in place (it was {nbrs_in}, is now "
            f"{[list(o) for o in nbrs]}): the graph is the caller's, and the next round would run on another one. "
            "Loop over [i, *out] (a new list) instead of appending i to out.")
        gx = _array(got[0], f"on {what}, the new x", (n, d), np.float64, hint="x keeps its shape (n, d).")
        gw = _array(got[1], f"on {what}, the new w", (n,), np.float64,
                    hint="w is one weight per node, shape (n,): the step divides x / w[:, None].")
        assert abs(gw.sum() - w.sum()) < 1e-9, (
            f"on {what}: sum of w went from {w.sum():.6g} to {gw.sum():.6g}. Push-sum keeps the total weight: "
            "each node keeps one share of w and sends one share to each out-neighbour, k_i + 1 shares in all. "
            "Hint: split w exactly as you split x.")
        assert np.allclose(gx.sum(axis=0), x.sum(axis=0), atol=1e-9), (
            f"on {what}: sum of x went from {_plain(x.sum(axis=0).round(6))} to {_plain(gx.sum(axis=0).round(6))}."
            " Push-sum keeps the total: node i keeps 1/(k_i + 1) of x_i and sends 1/(k_i + 1) to each of its k_i "
            "out-neighbours (not the whole x_i, and not x_i / k_i); it pushes and returns the numerators x, and "
            "divides by w only for the estimate.")
        A = _push_matrix(n, nbrs)
        _close(gw, A @ w, f"on {what}, the new w", rtol=1e-10, atol=1e-12,
               hint="Hint: new w_i = w_i / (k_i + 1) + the shares w_j / (k_j + 1) of the nodes j that send to i.")
        _close(gx, A @ x, f"on {what}, the new x", rtol=1e-10, atol=1e-12,
               hint="Hint: return the numerators x (sums of shares of x), not the estimates x / w; share by the "
                    "SENDER's out-degree, k_j + 1 for what node j sends.")
    # many rounds on the uneven graph: the estimates reach the true mean (computed directly)
    x0 = rng.standard_normal((4, 2))
    x, w = x0.copy(), np.ones(4)
    for _ in range(300):
        x, w = (np.asarray(v, float) for v in push_sum_step(x, w, uneven))
    _close(x / w[:, None], np.tile(x0.mean(axis=0), (4, 1)), "the estimates x / w after 300 rounds",
           rtol=1e-8, atol=1e-10, hint="Hint: every estimate must reach the mean of the starting values.")
    # minips' push-sum on its directed ring and exponential graph, round by round (same values, same graph)
    for name in ("directed-ring", "exponential"):
        g = make_topology(name, 8)
        indptr, out = g.csr_out()
        nbrs = [out[indptr[i]:indptr[i + 1]].tolist() for i in range(8)]
        x0 = rng.standard_normal((8, 2))
        ref = PushSum(g)
        ref.start(VectorisedCluster(8), x0)
        x, w = x0.copy(), np.ones(8)
        for t in range(10):
            ref.step(t)
            x, w = (np.asarray(v, float) for v in push_sum_step(x, w, nbrs))
        _close(x / w[:, None], ref.estimate(), f"the estimates after 10 rounds on minips' {name} graph of 8",
               rtol=1e-9, atol=1e-12)


# =============================================================================
# Step 13: compression
# =============================================================================
S13 = "13_compression"


@register("13.1", S13, "error_feedback_step", "that is ErrorFeedback.compress: nothing is lost, only delayed.")
def check_error_feedback_step(error_feedback_step):
    def top1(v):               # the check's own top-1 (ties: the first index), not minips'
        out = np.zeros_like(v)
        j = int(np.argmax(np.abs(v)))
        out[j] = v[j]
        return out

    def call(g, e, compress, what):
        g_before = g.copy()
        got = error_feedback_step(g, e, compress)
        assert got is not None, "error_feedback_step returned None; return the sent vector C(g + e)"
        assert np.array_equal(g, g_before), f"{what}: error_feedback_step modified g; leave the gradient as it is"
        _array(got, f"{what}: the sent vector", g.shape, kind="f", hint="Return what compress returned.")
        return np.asarray(got, dtype=np.float64)

    # 1. A hand-worked case: top-1, d = 3, three steps from e = 0 (values by hand, see the comments).
    grads = [np.array([1.0, -3.0, 2.0]), np.array([2.0, 1.0, -1.0]), np.array([0.0, 0.0, 1.0])]
    want_sent = [[0, -3, 0], [3, 0, 0], [0, 0, 2]]      # C(v): v = (1,-3,2), (3,1,1), (0,1,2)
    want_e = [[1, 0, 2], [0, 1, 1], [0, 1, 0]]          # v - C(v)
    e = np.zeros(3)
    calls = []

    def recording_top1(v):
        calls.append(np.array(v, dtype=np.float64))
        return top1(np.asarray(v, dtype=np.float64))

    for t, g in enumerate(grads):
        e_before = e.copy()
        calls.clear()
        sent = call(g, e, recording_top1, f"step {t + 1} of the hand case")
        assert calls, "error_feedback_step never called compress; send compress(g + e)"
        assert np.allclose(calls[0], g + e_before, atol=1e-12), (
            f"step {t + 1} of the hand case (top-1, g = {_plain(g)}, e = {_plain(e_before)}): compress was called "
            f"with {_plain(calls[0])}, expected g + e = {_plain(g + e_before)}. Hint: add the error memory to the "
            "gradient BEFORE compressing; that is how what was dropped gets sent later.")
        _close(sent, np.array(want_sent[t], float), f"step {t + 1} of the hand case (top-1, g = {_plain(g)}, "
               f"e = {_plain(e_before)}): the sent vector", atol=1e-12,
               hint="Hint: return what compress returned for g + e.")
        assert not np.array_equal(e, e_before) or np.array_equal(e_before, want_e[t]), (
            f"step {t + 1} of the hand case: e is unchanged after the call ({_plain(e)}), expected "
            f"{_plain(np.array(want_e[t], float))}. Hint: the memory must become the residual (g + e) - C(g + e), "
            "written into the caller's array in place (e[...] = ... or e -= ...); `e = ...` only rebinds your "
            "local name, and the caller keeps the stale error.")
        _close(e, np.array(want_e[t], float), f"step {t + 1} of the hand case (top-1, g = {_plain(g)}, e before = "
               f"{_plain(e_before)}): the error memory after the call", atol=1e-12,
               hint="Hint: the new error is the residual (g + e) - C(g + e): what was NOT sent, with the OLD e "
                    "included.")

    # 2. C(v) = v / 2, one step by hand: g = (4, -2), e = (2, 2) -> v = (6, 0), sent (3, 0), e = (3, 0).
    e = np.array([2.0, 2.0])
    sent = call(np.array([4.0, -2.0]), e, lambda v: np.asarray(v, dtype=np.float64) / 2, "C(v) = v/2")
    _close(sent, np.array([3.0, 0.0]), "with C(v) = v/2, g = (4, -2), e = (2, 2): the sent vector", atol=1e-12,
           hint="Hint: send C(g + e).")
    _close(e, np.array([3.0, 0.0]), "with C(v) = v/2, g = (4, -2), e = (2, 2): the error after the call",
           atol=1e-12, hint="Hint: e becomes (g + e) - C(g + e).")

    # 3. The invariant on random gradients, for several compressors, over many steps:
    #    sum_t sent_t + e_T == sum_t g_t (exactly, in real arithmetic), and e stays bounded for a contraction.
    rng = np.random.default_rng(131)

    def topk(k):
        def c(v):
            v = np.asarray(v, dtype=np.float64)
            out = np.zeros_like(v)
            idx = np.argsort(-np.abs(v), kind="stable")[:k]
            out[idx] = v[idx]
            return out
        return c

    def scaled_sign(v):
        v = np.asarray(v, dtype=np.float64)
        return np.abs(v).mean() * np.sign(v)

    def random_k(v):           # fresh draws on every call: call compress once per step
        v = np.asarray(v, dtype=np.float64)
        out = np.zeros_like(v)
        idx = rng.choice(v.size, 2, replace=False)
        out[idx] = v[idx]
        return out

    for name, comp, d in (("top-2", topk(2), 8), ("scaled sign", scaled_sign, 6), ("random-2", random_k, 7)):
        e = np.zeros(d)
        sent_sum, grad_sum = np.zeros(d), np.zeros(d)
        for t in range(40):
            g = rng.standard_normal(d)
            sent = call(g, e, comp, f"{name}, step {t + 1}")
            assert sent.shape == (d,), f"{name}: the sent vector has shape {sent.shape}, expected {(d,)}"
            sent_sum += sent
            grad_sum += g
        gap = float(np.max(np.abs(sent_sum + e - grad_sum)))
        assert gap < 1e-4, (                   # float32 arithmetic is fine; a lost or doubled residual is O(1)
            f"with the {name} compressor, after 40 random gradients: sum of sent vectors + final error differs from "
            f"the sum of the gradients by up to {gap:.3g}. With error feedback nothing is lost: "
            "sent + new error must equal g + old error at every step"
            + (" (and call compress only once per step: this compressor draws anew on every call)."
               if name == "random-2" else "."))
        assert float(np.linalg.norm(e)) < 10 * np.sqrt(d) * 4, (
            f"with the {name} compressor the error memory grew to norm {np.linalg.norm(e):.3g} in 40 steps: "
            "it must shrink by what is sent (e becomes (g + e) - C(g + e)).")
