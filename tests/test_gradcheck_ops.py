"""Every differentiable op passes a finite-difference gradient check (float64),
on shapes drawn by hypothesis."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minips import ops
from minips.gradcheck import GradcheckError, gradcheck
from minips.tensor import Tensor

shapes = st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple)
SETTINGS = settings(max_examples=15, deadline=None)


def arr(shape, seed, low=-2.0, high=2.0):
    return np.random.default_rng(seed).uniform(low, high, shape)


def positive(shape, seed):
    return arr(shape, seed, 0.5, 2.0)


def broadcast_partner(shape, seed):
    """A shape that broadcasts against ``shape`` (some axes set to 1 / dropped)."""
    r = np.random.default_rng(seed)
    s = tuple(1 if r.random() < 0.4 else n for n in shape)
    return s[r.integers(0, len(s)):] or (1,)


@SETTINGS
@given(shapes, st.integers(0, 10_000))
@pytest.mark.parametrize("op", [ops.add, ops.sub, ops.mul])
def test_binary_broadcasting(op, shape, seed):
    other = broadcast_partner(shape, seed)
    gradcheck(op, [arr(shape, seed), arr(other, seed + 1)])


@SETTINGS
@given(shapes, st.integers(0, 10_000))
def test_div(shape, seed):
    gradcheck(ops.div, [arr(shape, seed), positive(broadcast_partner(shape, seed), seed + 1)])


@SETTINGS
@given(shapes, st.integers(0, 10_000))
def test_neg_pow(shape, seed):
    gradcheck(ops.neg, [arr(shape, seed)])
    gradcheck(lambda a: ops.pow(a, 3), [arr(shape, seed)])
    gradcheck(lambda a: ops.pow(a, 0.5), [positive(shape, seed)])


@SETTINGS
@given(st.integers(1, 4), st.integers(1, 4), st.integers(1, 4), st.integers(0, 3), st.integers(0, 10_000))
def test_matmul(n, k, m, batch, seed):
    a_shape = (batch, n, k) if batch else (n, k)
    gradcheck(ops.matmul, [arr(a_shape, seed), arr((k, m), seed + 1)])
    gradcheck(ops.matmul, [arr((k,), seed), arr((k, m), seed + 1)])  # vector @ matrix
    gradcheck(ops.matmul, [arr((n, k), seed), arr((k,), seed + 1)])  # matrix @ vector
    gradcheck(ops.matmul, [arr((k,), seed), arr((k,), seed + 1)])  # vector @ vector (a scalar)


@SETTINGS
@given(shapes, st.integers(0, 10_000), st.booleans(), st.data())
@pytest.mark.parametrize("op", [ops.sum, ops.mean, ops.max])
def test_reductions(op, shape, seed, keepdims, data):
    axis = data.draw(st.one_of(st.none(), st.integers(0, len(shape) - 1)))
    # max: distinct values so the finite difference does not straddle a tie
    x = arr(shape, seed) if op is not ops.max else np.random.default_rng(seed).permutation(
        np.arange(int(np.prod(shape)), dtype=np.float64)).reshape(shape)
    gradcheck(lambda a: op(a, axis, keepdims), [x])


@SETTINGS
@given(shapes, st.integers(0, 10_000))
def test_shape_ops(shape, seed):
    x = arr(shape, seed)
    gradcheck(lambda a: ops.reshape(a, (-1,)), [x])
    gradcheck(lambda a: ops.transpose(a), [x])
    if len(shape) >= 2:
        gradcheck(lambda a: ops.flatten(a, 1), [x])
        gradcheck(lambda a: ops.transpose(a, (1, 0) + tuple(range(2, len(shape)))), [x])


@SETTINGS
@given(shapes, st.integers(0, 10_000))
def test_getitem(shape, seed):
    x = arr(shape, seed)
    gradcheck(lambda a: a[0], [x])
    gradcheck(lambda a: a[..., -1:], [x])
    idx = np.array([0, 0, shape[0] - 1])  # repeated index accumulates
    gradcheck(lambda a: ops.getitem(a, idx), [x])


@SETTINGS
@given(shapes, st.integers(0, 10_000))
def test_concat_stack(shape, seed):
    a, b = arr(shape, seed), arr(shape, seed + 1)
    gradcheck(lambda x, y: ops.concat([x, y], axis=0), [a, b])
    gradcheck(lambda x, y: ops.stack([x, y], axis=len(shape)), [a, b])


@SETTINGS
@given(shapes, st.integers(0, 10_000))
def test_elementwise_functions(shape, seed):
    gradcheck(ops.exp, [arr(shape, seed)])
    gradcheck(ops.log, [positive(shape, seed)])
    gradcheck(ops.tanh, [arr(shape, seed)])
    gradcheck(ops.sigmoid, [arr(shape, seed, -8, 8)])
    x = arr(shape, seed)
    x[np.abs(x) < 1e-3] = 0.5  # away from the kink
    gradcheck(ops.relu, [x])


@SETTINGS
@given(st.integers(1, 5), st.integers(2, 6), st.integers(0, 10_000))
def test_log_softmax_and_cross_entropy(n, c, seed):
    gradcheck(lambda a: ops.log_softmax(a, axis=-1), [arr((n, c), seed, -5, 5)])
    labels = np.random.default_rng(seed).integers(0, c, n)
    gradcheck(lambda a: ops.softmax_cross_entropy(a, labels), [arr((n, c), seed, -5, 5)])


def test_cross_entropy_is_stable_for_huge_logits():
    logits = Tensor(np.array([[1000.0, 0.0], [0.0, -1000.0]], np.float32), requires_grad=True)
    loss = ops.softmax_cross_entropy(logits, np.array([0, 1]))
    assert np.isfinite(loss.item())
    np.testing.assert_allclose(loss.item(), 500.0, rtol=1e-5)
    loss.backward()
    assert np.isfinite(logits.grad).all()


def test_cross_entropy_rejects_bad_labels():
    logits = Tensor(np.zeros((3, 4)))
    with pytest.raises(ValueError, match="out of range: found 4, valid classes are 0..3"):
        ops.softmax_cross_entropy(logits, np.array([0, 4, 1]))
    with pytest.raises(ValueError, match="shape"):
        ops.softmax_cross_entropy(logits, np.array([0, 1]))
    with pytest.raises(ValueError, match="integers"):
        ops.softmax_cross_entropy(logits, np.array([0.0, 1.0, 2.0]))


def test_gradcheck_catches_a_wrong_backward():
    from minips.autograd import Function

    class WrongSquare(Function):
        def forward(self, a):
            self.a = a
            return a * a

        def backward(self, g):
            return g * self.a  # should be 2 * a

    with pytest.raises(GradcheckError, match="input 0, element"):
        gradcheck(lambda a: WrongSquare.apply(a), [np.array([1.0, 2.0])])


def test_gradcheck_requires_float64():
    with pytest.raises(TypeError, match="float64"):
        gradcheck(ops.exp, [Tensor(np.ones(2, np.float32), requires_grad=True)])


def test_gradcheck_refuses_to_check_nothing():
    """No output requiring a gradient would pass any backward unchecked."""
    x = Tensor(np.ones((2, 3)), requires_grad=True)
    with pytest.raises(ValueError, match="nothing to check"):
        gradcheck(lambda t: t.detach() * 2.0, [x])
    with pytest.raises(ValueError, match="nothing to check"):
        gradcheck(lambda t: t * 2.0, [Tensor(np.ones(3))])  # no input requires grad
    assert gradcheck(lambda t: t * 2.0, [np.ones(3)]) is not None  # a real check still reports
