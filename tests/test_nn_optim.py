"""Modules, state dicts, seeded init, SGD and schedules."""
import numpy as np
import pytest

import minips as mp
from minips import nn, optim
from minips.gradcheck import gradcheck
from minips.tensor import Tensor


def test_linear_gradcheck_and_shape_error():
    mp.random.seed(0)
    lin = nn.Linear(3, 2)
    for p in lin.parameters():
        p.data = p.data.astype(np.float64)
    x = np.random.default_rng(0).standard_normal((4, 3))
    gradcheck(lambda a, w, b: a @ w.T + b, [x, lin.weight.data, lin.bias.data])
    with pytest.raises(ValueError, match=r"Linear\(3, 2\): input has 5 features"):
        lin(Tensor(np.ones((2, 5), np.float32)))


def test_seed_fixes_initialisation():
    mp.random.seed(42)
    a = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2)).state_dict()
    mp.random.seed(42)
    b = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2)).state_dict()
    mp.random.seed(43)
    c = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2)).state_dict()
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["0.weight"], c["0.weight"])


def test_kaiming_variance():
    w = nn.init.kaiming_uniform((256, 512), 512, rng=np.random.default_rng(0))
    assert w.dtype == np.float32
    np.testing.assert_allclose(w.var(), 2 / 512, rtol=0.05)


def test_named_parameters_order_and_state_dict_errors():
    m = nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 2))
    names = [n for n, _ in m.named_parameters()]
    assert names == ["0.weight", "0.bias", "2.weight", "2.bias"]
    state = m.state_dict()
    m2 = nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 2))
    m2.load_state_dict(state)
    assert np.array_equal(m2[2].weight.data, state["2.weight"])
    with pytest.raises(KeyError, match=r"missing keys \['2.bias'\]"):
        m2.load_state_dict({k: v for k, v in state.items() if k != "2.bias"})
    bad = dict(state, **{"0.weight": np.zeros((5, 4))})
    with pytest.raises(ValueError, match=r"'0.weight' has shape \(3, 4\) in the model but \(5, 4\)"):
        m2.load_state_dict(bad)


def test_dropout_train_eval_and_scaling():
    mp.random.seed(0)
    d = nn.Dropout(0.25)
    x = Tensor(np.ones((200, 100), np.float32), requires_grad=True)
    y = d(x)
    kept = y.data != 0
    np.testing.assert_allclose(y.data[kept], 1 / 0.75, rtol=1e-6)
    assert abs(kept.mean() - 0.75) < 0.01
    y.sum().backward()
    np.testing.assert_allclose(x.grad, y.data)  # same mask in backward
    d.eval()
    assert d(x) is x
    with pytest.raises(ValueError, match="Dropout probability"):
        nn.Dropout(1.0)


def test_sgd_momentum_matches_hand_computation():
    p = nn.Parameter(np.array([1.0, 2.0]), dtype=np.float64)
    opt = optim.SGD([p], lr=0.1, momentum=0.9, weight_decay=0.01)
    grads = [np.array([0.5, -1.0]), np.array([0.2, 0.3])]
    w, v = p.data.copy(), None
    for g in grads:
        p.grad = g.copy()
        opt.step()
        d = g + 0.01 * w
        v = d if v is None else 0.9 * v + d
        w = w - 0.1 * v
    np.testing.assert_allclose(p.data, w)


def test_sgd_nesterov_matches_hand_computation():
    p = nn.Parameter(np.array([1.0]), dtype=np.float64)
    opt = optim.SGD([p], lr=0.5, momentum=0.5, nesterov=True)
    p.grad = np.array([2.0])
    opt.step()  # v = 2, step = 2 + 0.5*2 = 3
    np.testing.assert_allclose(p.data, [1.0 - 1.5])
    p.grad = np.array([1.0])
    opt.step()  # v = 0.5*2 + 1 = 2, step = 1 + 0.5*2 = 2
    np.testing.assert_allclose(p.data, [-0.5 - 1.0])


def test_sgd_rejects_bad_hyperparameters():
    p = nn.Parameter(np.zeros(1))
    with pytest.raises(ValueError, match="lr must be > 0"):
        optim.SGD([p], lr=0)
    with pytest.raises(ValueError, match="momentum"):
        optim.SGD([p], lr=0.1, momentum=1.0)
    with pytest.raises(ValueError, match="nesterov"):
        optim.SGD([p], lr=0.1, nesterov=True)


def test_sgd_state_roundtrip():
    p = nn.Parameter(np.ones(3))
    opt = optim.SGD([p], lr=0.1, momentum=0.9)
    p.grad = np.ones(3, np.float32)
    opt.step()
    state = opt.state_dict()
    opt2 = optim.SGD([nn.Parameter(np.ones(3))], lr=0.1, momentum=0.9)
    opt2.load_state_dict(state)
    np.testing.assert_array_equal(opt2.buffers[0], opt.buffers[0])
    with pytest.raises(ValueError, match="momentum buffers"):
        optim.SGD([p, p], lr=0.1).load_state_dict(state)


def test_schedules():
    warm = optim.make_schedule("constant", 1.0, 100, warmup_steps=4)
    assert [warm(s) for s in range(5)] == [0.25, 0.5, 0.75, 1.0, 1.0]
    cos = optim.make_schedule("cosine", 1.0, 10)
    assert cos(0) == 1.0 and abs(cos(5) - 0.5) < 1e-12 and abs(cos(10)) < 1e-12
    step = optim.StepLR(1.0, 3, gamma=0.5)
    assert [step(s) for s in (0, 2, 3, 6)] == [1.0, 1.0, 0.5, 0.25]
    with pytest.raises(ValueError, match="unknown lr schedule 'linear'"):
        optim.make_schedule("linear", 1.0, 10)


def test_mlp_learns_a_separable_problem():
    from minips.models import MLP
    mp.random.seed(0)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((256, 1, 2, 2)).astype(np.float32)
    y = (x.reshape(256, -1).sum(1) > 0).astype(np.int64)
    model = MLP(4, (16,), 2)
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    first = None
    for _ in range(60):
        opt.zero_grad()
        loss = model.loss((x, y))
        loss.backward()
        opt.step()
        first = first if first is not None else loss.item()
    assert loss.item() < 0.2 * first
