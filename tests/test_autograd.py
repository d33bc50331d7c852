"""Autograd engine: graph walk, accumulation, no_grad, hooks, errors."""
import numpy as np
import pytest

import minips as mp
from minips import ops


def test_simple_chain_rule():
    x = mp.tensor(np.array([1.0, -2.0, 3.0]), requires_grad=True)
    y = (x * x * 3.0 + x).sum()  # dy/dx = 6x + 1
    y.backward()
    np.testing.assert_allclose(x.grad, 6 * x.data + 1)


def test_gradient_accumulates_across_backward_calls():
    x = mp.tensor(np.array([2.0]), requires_grad=True)
    (x * 3.0).sum().backward()
    (x * 4.0).sum().backward()
    np.testing.assert_allclose(x.grad, [7.0])


def test_reused_tensor_sums_paths():
    x = mp.tensor(np.array([3.0]), requires_grad=True)
    a = x * 2.0
    y = (a * a + a).sum()  # y = 4x^2 + 2x -> 8x + 2
    y.backward()
    np.testing.assert_allclose(x.grad, [26.0])


def test_deep_graph_no_recursion_limit():
    x = mp.tensor(np.array([1.0]), requires_grad=True)
    y = x
    for _ in range(100_000):
        y = y + 1e-6
    y.sum().backward()
    np.testing.assert_allclose(x.grad, [1.0])


def test_no_grad_records_nothing():
    x = mp.tensor(np.ones(3), requires_grad=True)
    with mp.no_grad():
        y = x * 2.0
    assert not y.requires_grad and y.is_leaf
    with pytest.raises(RuntimeError, match="does not require grad"):
        y.sum().backward()


def test_detach_cuts_graph():
    x = mp.tensor(np.array([2.0]), requires_grad=True)
    y = (x * x).detach() * x  # only the last factor is differentiated
    y.sum().backward()
    np.testing.assert_allclose(x.grad, [4.0])


def test_non_scalar_backward_needs_grad():
    x = mp.tensor(np.ones(3), requires_grad=True)
    with pytest.raises(RuntimeError, match="explicit grad"):
        (x * 2.0).backward()
    (x * 2.0).backward(np.array([1.0, 2.0, 3.0]))
    np.testing.assert_allclose(x.grad, [2.0, 4.0, 6.0])


def test_freed_graph_is_reported():
    x = mp.tensor(np.ones(2), requires_grad=True)
    y = (x * x).sum()
    y.backward()
    with pytest.raises(RuntimeError, match="retain_graph"):
        y.backward()
    z = (x * x).sum()
    z.backward(retain_graph=True)
    z.backward()  # allowed


def test_integer_tensor_cannot_require_grad():
    with pytest.raises(TypeError, match="floating"):
        mp.tensor(np.arange(3), requires_grad=True)


def test_float32_stays_float32():
    x = mp.tensor(np.ones(3, np.float32), requires_grad=True)
    y = (x * 2.0 + 1.0) / 3.0
    assert y.dtype == np.float32
    y.sum().backward()
    assert x.grad.dtype == np.float32


def test_hook_fires_once_when_leaf_grad_complete():
    w = mp.tensor(np.ones(2), requires_grad=True)
    calls = []
    w.register_grad_hook(lambda t: calls.append(t.grad.copy()))
    x = mp.tensor(np.array([1.0, 2.0]))
    y = (w * x).sum() + (w * w).sum()  # w used twice
    y.backward()
    assert len(calls) == 1  # only after both contributions
    np.testing.assert_allclose(calls[0], x.data + 2 * w.data)


def test_grad_accumulates_in_place_into_existing_view():
    buf = np.zeros(4)
    w = mp.tensor(np.ones(2), requires_grad=True)
    w.grad = buf[1:3]
    (w * 5.0).sum().backward()
    np.testing.assert_allclose(buf, [0, 5, 5, 0])


def test_multi_output_function_unused_output_gets_zeros():
    class Split(mp.Function):
        def forward(self, a):
            return a * 2, a * 3

        def backward(self, g1, g2):
            return g1 * 2 + g2 * 3

    x = mp.tensor(np.ones(3), requires_grad=True)
    a, b = Split.apply(x)
    a.sum().backward()  # b unused: its gradient is zero
    np.testing.assert_allclose(x.grad, 2 * np.ones(3))


def test_wrong_gradient_shape_is_reported():
    class Bad(mp.Function):
        def forward(self, a):
            return a.sum()

        def backward(self, g):
            return np.ones(7)

    x = mp.tensor(np.ones(3), requires_grad=True)
    with pytest.raises(RuntimeError, match="Bad.backward.*shape"):
        Bad.apply(x).backward()


def test_ops_reject_bad_shapes_clearly():
    a = mp.tensor(np.ones((2, 3)))
    with pytest.raises(ValueError, match=r"\(2, 3\) and \(4, 5\)"):
        ops.matmul(a, mp.tensor(np.ones((4, 5))))
    with pytest.raises(ValueError, match="cannot reshape"):
        a.reshape(4, 2)


def test_leaf_gradients_complete_in_reverse_layer_order():
    """Backward visits nodes in reverse creation order, so the last layer's
    weights (used as x @ W.T: W is transposed just before the product) are done
    first. Overlapped allreduce relies on this to post the last buckets early."""
    from minips import nn
    from minips.models import MLP

    mp.random.seed(0)
    model = MLP(6, (5, 4), 3)
    order = []
    for name, p in model.named_parameters():
        p.register_grad_hook(lambda t, name=name: order.append(name))
    x = np.random.default_rng(0).standard_normal((7, 6)).astype(np.float32)
    nn.cross_entropy(model(mp.tensor(x)), np.arange(7) % 3).backward()
    layers = [n.rsplit(".", 1)[0] for n in order]
    assert layers == ["net.5", "net.5", "net.3", "net.3", "net.1", "net.1"], order
