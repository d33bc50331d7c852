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
# # Step 1: Tensors and autograd
#
# **What you will learn**
#
# - what a minips `Tensor` is: a NumPy array, plus its gradient, plus the operation that made it;
# - how `backward()` applies the chain rule over the graph of operations, in reverse
#   topological order, and why gradients *accumulate*;
# - how to write a new differentiable operation (a `Function` with `forward` and `backward`);
# - how to check any backward against finite differences with `gradcheck`, and why that is
#   done in float64.
#
# **Runs in**: one process, a few seconds. **Files to read alongside**:
# `minips/tensor.py`, `minips/autograd.py` (the whole engine, about 200 lines),
# `minips/ops.py`, `minips/tensor_methods.py`, `minips/gradcheck.py`.
#
# Run it as a script (`python tutorials/01_tensors_and_autograd.py`) or open it as a notebook
# (see `tutorials/README.md`). Exercises stop the step until you solve them; set
# `MINIPS_TUTORIAL_SOLUTIONS=1` to go on with the reference solutions.

# %%
import inspect

import matplotlib.pyplot as plt
import numpy as np

import minips as mp
from _common import exercise, out_dir, show
from minips import autograd, ops
from minips.gradcheck import GradcheckError, gradcheck

OUT = out_dir("01")

# %% [markdown]
# ## 1. A tensor is an array with a memory
#
# `mp.tensor(data, requires_grad=True)` wraps a NumPy array. `requires_grad=True` asks minips
# to record every operation done with it, so that it can later compute the gradient of a
# result with respect to it. A tensor you make yourself is a **leaf** of the graph.

# %%
x = mp.tensor([1.0, 2.0, 3.0], requires_grad=True)
print(x, "| data:", x.data, x.dtype, "| grad:", x.grad, "| leaf:", x.is_leaf)

# %% [markdown]
# Arithmetic on tensors calls the operations of `minips/ops.py`: `x * y` is `ops.mul(x, y)`,
# `x.exp()` is `ops.exp(x)`. Each one is a small class derived from
# `minips.autograd.Function`, with a `forward` (NumPy in, NumPy out) and a `backward` (the
# chain rule, written by hand next to it). Here is the multiplication, printed from the
# library itself:

# %%
print(inspect.getsource(ops.Mul))

# %% [markdown]
# `Function.apply` (in `minips/autograd.py`) runs `forward` on the arrays and, if any input
# requires a gradient, returns a new tensor that remembers the node (`tensor._fn`); the node
# remembers its inputs (`fn.inputs`). That chain of references *is* the graph.
#
# The files build on each other in one direction: `tensor.py` (the Tensor alone) <-
# `autograd.py` (Function, backward) <- `ops.py` (the operations). The operators `+ - * / @`
# and methods like `.exp()` and `.backward()` need the layers above `tensor.py`, so they are
# bound onto the Tensor class in one small file on top, `minips/tensor_methods.py`, which
# `import minips` runs. No file imports one above it.

# %%
w = mp.tensor([[0.5, -1.0, 2.0]], requires_grad=True)
y = (w @ x).tanh().sum() + (x * x).mean()


def show_graph(t, indent=0):
    """Print the graph that produced tensor t, the output at the top (a leaf used twice,
    like x in x * x, is printed twice)."""
    name = type(t._fn).__name__ if t._fn is not None else "leaf"
    print("  " * indent + f"{name}  shape={t.shape}")
    if t._fn is not None:
        for inp in t._fn.inputs:
            if isinstance(inp, mp.Tensor):
                show_graph(inp, indent + 1)


show_graph(y)

# %% [markdown]
# ## 2. `backward()`: the chain rule in reverse topological order
#
# `y.backward()` calls `minips.autograd.backward`. It first orders the nodes so that each
# node comes **after every node that uses its output** (`_topological_order`, an iterative
# depth-first search: no recursion, so a 10,000-step LSTM graph works too). Then it walks
# that list once: each node receives dL/d(its output), calls its `backward` to get
# dL/d(its inputs), and hands those on. Leaves add what they receive into `.grad`.

# %%
print("visit order:", [type(fn).__name__ for fn in autograd._topological_order(y._fn)])
y.backward()
print("dy/dx =", x.grad)
print("dy/dw =", w.grad)

# Check one entry by hand: y = tanh(w.x) + mean(x^2), so dy/dx = (1 - tanh(w.x)^2) w + 2x/3
s = float((w.data @ x.data)[0])
print("by hand:", (1 - np.tanh(s) ** 2) * w.data[0] + 2 * x.data / 3)

# %% [markdown]
# After `backward`, the graph is freed (each node's saved arrays are dropped as soon as it
# has been used, so memory is released during the backward pass). A second `backward` on
# the same graph is an error with a message that names the fix:

# %%
try:
    y.backward()
except RuntimeError as e:
    print("RuntimeError:", e)

# %% [markdown]
# ### Gradients accumulate
#
# A leaf **adds** every gradient it receives into `.grad` (in place: `leaf.grad += g`).
# That is what makes a variable used twice get the sum of both contributions, and it is
# also why a training loop must zero the gradients before each backward pass. In the
# distributed steps (5-8) each parameter's `.grad` is a *view* into one big flat buffer
# that MPI sends; adding in place keeps the view, and the algorithm zeroes the whole buffer
# before each backward (`Algorithm.before_backward` in `minips/distributed/algorithms/base.py`).

# %%
a = mp.tensor([1.0, 2.0], requires_grad=True)
(a * 10).sum().backward()
print("after one backward:", a.grad)
(a * 10).sum().backward()
print("after two:         ", a.grad, "<- added, not replaced")
a.zero_grad()
print("after zero_grad(): ", a.grad)

# %% [markdown]
# ### Broadcasting
#
# NumPy broadcasting stretches an operand (a bias of shape (3,) added to a batch of shape
# (2, 3) is used twice). The gradient of a stretched operand is the **sum** over the copies:
# `minips.ops.unbroadcast` does that for every elementwise op.

# %%
batch = mp.tensor(np.ones((2, 3)), requires_grad=True)
bias = mp.tensor(np.zeros(3), requires_grad=True)
(batch + bias).sum().backward()
print("bias.grad =", bias.grad, "(each bias entry was used by 2 rows)")

# %% [markdown]
# ### Not recording: `no_grad`
#
# Evaluation and weight updates must not build a graph. Inside `with mp.no_grad():`
# operations return plain tensors with `requires_grad=False`.

# %%
with mp.no_grad():
    z = x * 2
print("requires_grad inside no_grad:", z.requires_grad)

# %% [markdown]
# ## 3. Checking a backward: `gradcheck`
#
# A wrong `backward` does not crash: training just goes badly. So every op in minips is
# checked against **central finite differences**,
# `(f(x + eps) - f(x - eps)) / (2 eps)`, one input element at a time
# (`minips/gradcheck.py`; the tests do it for every op in `tests/test_gradcheck_ops.py`).
# For a function with a tensor output, `gradcheck` compares the gradient of
# `sum(f(x) * W)` for a fixed random `W`, which checks every output at once.

# %%
A = np.random.default_rng(0).standard_normal((3, 4))
B = np.random.default_rng(1).standard_normal((4, 2))
report = gradcheck(lambda a, b: (a @ b).tanh(), [A, B])
print("worst element:", report)


# %% [markdown]
# A deliberately broken op shows what a failure looks like: the message names the input,
# the element and both values.

# %%
class BrokenSquare(mp.Function):
    def forward(self, a):
        self.a = a
        return a * a

    def backward(self, g):
        return g * self.a  # wrong: should be 2 * a * g


try:
    gradcheck(lambda t: BrokenSquare.apply(t), [np.array([1.0, -2.0, 3.0])])
except GradcheckError as e:
    print("GradcheckError:", e)

# %% [markdown]
# ### Why float64 and `eps = 1e-6`?
#
# The finite difference has two errors: the **truncation** error of the formula, about
# `eps^2` (for central differences), and the **rounding** error of subtracting two nearly
# equal numbers, about `machine epsilon / eps`. Their sum is smallest in between. The figure
# measures the error of the derivative of `tanh` at 0.5 for a range of `eps`, in float32
# and float64. In float64, at gradcheck's `eps = 1e-6`, the error is about 1e-11: any
# disagreement above `atol = 1e-5` is a bug. In float32 the error at that `eps` is about
# 1e-2, as large as a real bug, and even the best `eps` only reaches about 1e-5 (and
# below 1e-8, `x + eps == x`). That is why `gradcheck` refuses float32 inputs.

# %%
def fd_error(dtype, eps):
    x0 = dtype(0.5)
    e = dtype(eps)
    numeric = (np.tanh(x0 + e) - np.tanh(x0 - e)) / (2 * e)
    exact = 1 - np.tanh(0.5) ** 2
    return abs(float(numeric) - exact)


eps_values = np.logspace(-12, -1, 45)
fig, ax = plt.subplots(figsize=(6, 4))
for dtype, label in ((np.float32, "float32"), (np.float64, "float64")):
    ax.loglog(eps_values, [max(fd_error(dtype, e), 1e-17) for e in eps_values], "o-", ms=3, label=label)
ax.axvline(1e-6, color="gray", ls=":", label="gradcheck's eps = 1e-6")
ax.set_xlabel("eps")
ax.set_ylabel("|finite difference - exact derivative|")
ax.set_title("central differences: rounding (left) vs truncation (right)")
ax.legend(loc="lower right")
show(fig, OUT / "finite_difference_error.png")


# %% [markdown]
# ## Exercise 1.1: the backward of softplus
#
# `softplus(a) = log(1 + e^a)` is a smooth ReLU. Its forward is given (computed stably with
# `np.logaddexp`). Write its `backward`: given `g = dL/dy`, return `dL/da`.
# (Hint: differentiate `log(1 + e^a)`. `np.exp(a)` overflows for `a` above about 709; the
# stable way, used by `minips.ops._sigmoid`, goes through `np.exp(-np.abs(a))`.)
# Return a new array: do not write into `g` (autograd's) or `self.a` (the input tensor's own
# data). The check runs `gradcheck` on your op.

# %%
class Softplus(mp.Function):
    def forward(self, a):
        self.a = a
        return np.logaddexp(0.0, a)

    def backward(self, g):
        # YOUR CODE HERE: return dL/da (same shape as a)
        raise NotImplementedError


# %%
Softplus = exercise("1.1", Softplus)


# %% [markdown]
# ## Exercise 1.2: predict the gradient
#
# Without running it, what is `x.grad` after this code, for any starting values `x0`?
#
# ```python
# x = mp.tensor(x0, requires_grad=True)
# (x * x).sum().backward()
# (3 * x).sum().backward()
# ```
#
# Write `predicted_grad(x0)` returning it as a new NumPy array, computed from `x0` with NumPy
# only (no minips), leaving `x0` as it is. The check compares it with what minips does.

# %%
def predicted_grad(x0):
    # YOUR CODE HERE
    raise NotImplementedError


# %%
predicted_grad = exercise("1.2", predicted_grad)

# %% [markdown]
# ## What you saw
#
# - A tensor remembers the `Function` that made it; the functions remember their inputs:
#   that is the graph. `backward()` visits it once, in reverse topological order.
# - Leaves accumulate gradients in place; zero them before each backward.
# - `gradcheck` (float64, central differences) is how every op in minips is tested, and
#   how you will test any op you add.
#
# **Next**: step 2 puts these ops together into layers, and looks at the Numba kernels that
# make the convolution fast.
