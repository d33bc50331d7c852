"""The LSTM kernel against its NumPy twin, finite differences and PyTorch;
the LSTM, Embedding and masked sequence loss layers."""
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minips import nn
from minips.gradcheck import gradcheck
from minips.kernels import lstm as klstm
from minips.kernels import reference as ref
from minips.nn.recurrent import EmbeddingFunction, LSTMFunction
from minips.tensor import Tensor


def lstm_arrays(T, N, F, H, dtype, seed, with_state=True):
    r = np.random.default_rng(seed)
    a = lambda *s: r.uniform(-1, 1, s).astype(dtype)  # noqa: E731
    x, w_ih, w_hh, b = a(T, N, F), a(4 * H, F), a(4 * H, H), a(4 * H)
    h0, c0 = (a(N, H), a(N, H)) if with_state else (None, None)
    return x, w_ih, w_hh, b, h0, c0


sizes = st.tuples(st.integers(1, 6), st.integers(1, 4), st.integers(1, 7), st.integers(1, 9))


# --- kernel == twin -----------------------------------------------------------------
@settings(max_examples=12, deadline=None)
@given(sizes, st.booleans(), st.sampled_from([np.float64, np.float32]), st.integers(0, 10_000))
def test_kernel_matches_twin(size, with_state, dtype, seed):
    T, N, F, H = size
    x, w_ih, w_hh, b, h0, c0 = lstm_arrays(T, N, F, H, dtype, seed, with_state)
    tol = dict(rtol=0, atol=1e-12) if dtype == np.float64 else dict(rtol=0, atol=2e-5)
    fwd = klstm.lstm_forward(x, w_ih, w_hh, b, h0, c0)
    fwd_ref = ref.lstm_forward(x, w_ih, w_hh, b, h0, c0)
    for name, got, want in zip(("h", "c", "gates", "tanh_c"), fwd, fwd_ref):
        assert got.dtype == dtype and got.shape == want.shape, name
        np.testing.assert_allclose(got, want, **tol, err_msg=name)
    r = np.random.default_rng(seed + 1)
    dh_out = r.standard_normal((T, N, H)).astype(dtype)
    dh_n, dc_n = r.standard_normal((N, H)).astype(dtype), r.standard_normal((N, H)).astype(dtype)
    grads = klstm.lstm_backward(dh_out, dh_n, dc_n, x, w_ih, w_hh, h0, c0, *fwd_ref)
    grads_ref = ref.lstm_backward(dh_out, dh_n, dc_n, x, w_ih, w_hh, h0, c0, *fwd_ref)
    tol = dict(rtol=0, atol=1e-11) if dtype == np.float64 else dict(rtol=1e-4, atol=1e-4)
    for name, got, want in zip(("dx", "dh0", "dc0", "dw_ih", "dw_hh", "db"), grads, grads_ref):
        assert got.dtype == dtype and got.shape == want.shape, name
        np.testing.assert_allclose(got, want, **tol, err_msg=name)


@pytest.mark.parametrize("dtype, atol", [(np.float64, 1e-13), (np.float32, 2e-6)])
def test_step_kernels_match_their_twins(dtype, atol):
    r = np.random.default_rng(4)
    N, H = 3, 5
    a = lambda *s: r.uniform(-3, 3, s).astype(dtype)  # noqa: E731
    z, zh, b, c_prev = a(N, 4 * H), a(N, 4 * H), a(4 * H), a(N, H)
    want = ref.step_forward(z, zh, b, c_prev)
    got = [z.copy(), np.empty_like(c_prev), np.empty_like(c_prev), np.empty_like(c_prev)]
    klstm.step_forward(got[0], zh, b, c_prev, got[1], got[2], got[3])
    for name, g, w in zip(("gates", "c", "tanh_c", "h"), got, want):
        np.testing.assert_allclose(g, w, rtol=0, atol=atol, err_msg=name)
    gates, _, tanh_c, _ = want
    dh_out, dh, dc = a(N, H), a(N, H), a(N, H)
    dz_want, dc_prev_want = ref.step_backward(gates, c_prev, tanh_c, dh_out, dh, dc)
    dz, dc_k = np.empty_like(z), dc.copy()
    klstm.step_backward(gates, c_prev, tanh_c, dh_out, dh, dc_k, dz)
    np.testing.assert_allclose(dz, dz_want, rtol=0, atol=4 * atol)
    np.testing.assert_allclose(dc_k, dc_prev_want, rtol=0, atol=4 * atol)


def test_fast_float32_tanh_is_accurate():
    x = np.concatenate([np.linspace(-20, 20, 200_001), [0.0, 1e-30, -1e-30, 9.0, -9.0, np.inf, -np.inf]])
    x32 = x.astype(np.float32)
    # A gate-shaped call through the kernel: bias 0, zero recurrent part.
    n = x32.size // 4 * 4
    z = x32[:n].reshape(1, n).copy()
    zh, b = np.zeros_like(z), np.zeros(n, np.float32)
    hidden = n // 4
    c_prev = np.zeros((1, hidden), np.float32)
    c, tanh_c, h = np.empty_like(c_prev), np.empty_like(c_prev), np.empty_like(c_prev)
    klstm.step_forward(z, zh, b, c_prev, c, tanh_c, h)
    exact = x[:n].astype(np.float64)
    sig = 0.5 * np.tanh(0.5 * exact) + 0.5
    g = slice(2 * hidden, 3 * hidden)
    assert np.abs(z[0, g] - np.tanh(exact[g])).max() < 5e-7           # candidate gate: tanh
    for s in (slice(0, 2 * hidden), slice(3 * hidden, n)):            # i, f, o: sigmoid
        assert np.abs(z[0, s] - sig[s]).max() < 5e-7
    assert np.abs(tanh_c - np.tanh(c.astype(np.float64))).max() < 5e-7


def test_gate_order_is_i_f_g_o_and_forget_bias_is_one():
    # One step with x = 0: z = b, so each gate is its own bias block.
    H = 3
    bi, bf, bg, bo = 0.3, -0.7, 0.5, 1.1
    b = np.repeat([bi, bf, bg, bo], H).astype(np.float64)
    x = np.zeros((1, 2, 4))
    c0 = np.full((2, H), 2.0)
    h, c, _, _ = klstm.lstm_forward(x, np.ones((4 * H, 4)), np.ones((4 * H, H)), b, np.zeros((2, H)), c0)
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    c_want = sig(bf) * 2.0 + sig(bi) * np.tanh(bg)
    np.testing.assert_allclose(c[0], c_want, rtol=1e-12)
    np.testing.assert_allclose(h[0], sig(bo) * np.tanh(c_want), rtol=1e-12)
    layer = nn.LSTM(4, H)
    np.testing.assert_array_equal(layer.bias.data.reshape(4, H), np.repeat([[0], [1], [0], [0]], H, axis=1))


# --- gradients ------------------------------------------------------------------------
def _lstm_all_outputs(x, w_ih, w_hh, b, h0=None, c0=None):
    h, h_n, c_n = LSTMFunction.apply(x, w_ih, w_hh, b, h0, c0)
    return h, h_n, c_n


@pytest.mark.parametrize("with_state", [True, False])
def test_lstm_gradcheck(with_state):
    x, w_ih, w_hh, b, h0, c0 = lstm_arrays(3, 2, 3, 2, np.float64, 7, with_state)
    inputs = [x, w_ih, w_hh, b] + ([h0, c0] if with_state else [])
    gradcheck(_lstm_all_outputs, inputs)


def test_lstm_gradcheck_through_final_state_only():
    # Only c_n reaches the loss: the output path must get zero gradient, not garbage.
    x, w_ih, w_hh, b, h0, c0 = lstm_arrays(4, 2, 2, 3, np.float64, 3)
    gradcheck(lambda *a: LSTMFunction.apply(*a)[2], [x, w_ih, w_hh, b, h0, c0])


def test_lstm_matches_torch():
    torch = pytest.importorskip("torch")
    T, N, F, H = 5, 3, 4, 6
    x, w_ih, w_hh, b, h0, c0 = lstm_arrays(T, N, F, H, np.float64, 11)
    m = torch.nn.LSTM(F, H).double()
    with torch.no_grad():
        m.weight_ih_l0.copy_(torch.from_numpy(w_ih))
        m.weight_hh_l0.copy_(torch.from_numpy(w_hh))
        m.bias_ih_l0.copy_(torch.from_numpy(b))
        m.bias_hh_l0.zero_()
    xt = torch.from_numpy(x).requires_grad_(True)
    h0t, c0t = torch.from_numpy(h0).requires_grad_(True), torch.from_numpy(c0).requires_grad_(True)
    out_t, (hn_t, cn_t) = m(xt, (h0t[None], c0t[None]))
    (out_t.sum() + 2 * cn_t.sum()).backward()

    ts = [Tensor(a, requires_grad=True) for a in (x, w_ih, w_hh, b, h0, c0)]
    out, (h_n, c_n) = nn.recurrent.lstm(*ts)
    (out.sum() + c_n.sum() * 2.0).backward()
    np.testing.assert_allclose(out.data, out_t.detach().numpy(), atol=1e-12)
    np.testing.assert_allclose(c_n.data, cn_t[0].detach().numpy(), atol=1e-12)
    pairs = [(ts[0], xt), (ts[1], m.weight_ih_l0), (ts[2], m.weight_hh_l0), (ts[3], m.bias_ih_l0),
             (ts[4], h0t), (ts[5], c0t)]
    for mine, theirs in pairs:
        np.testing.assert_allclose(mine.grad, theirs.grad.numpy(), atol=1e-11)


# --- the layer --------------------------------------------------------------------------
def test_lstm_module_shapes_and_state():
    layer = nn.LSTM(5, 7)
    x = Tensor(np.random.default_rng(0).standard_normal((4, 3, 5)).astype(np.float32))
    out, (h_n, c_n) = layer(x)
    assert out.shape == (4, 3, 7) and h_n.shape == (3, 7) and c_n.shape == (3, 7)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out.data[-1], h_n.data)
    # Running the sequence in two halves, carrying the state, gives the same output.
    out1, state = layer(x[:2])
    out2, _ = layer(x[2:], state)
    np.testing.assert_allclose(np.concatenate([out1.data, out2.data]), out.data, atol=1e-6)
    assert [n for n, _ in layer.named_parameters()] == ["weight_ih", "weight_hh", "bias"]


@pytest.mark.parametrize("shape, state, match", [
    ((4, 3, 6), None, r"LSTM\(5, 7\): input has 6 features in dim 2"),
    ((3, 5), None, r"LSTM\(5, 7\): input must be \(T, N, F\)"),
    ((0, 3, 5), None, r"sequence length T \(dim 0\)"),
    ((4, 3, 5), ((3, 6), (3, 7)), r"initial state h0 has shape \(3, 6\), expected \(N, H\) = \(3, 7\)"),
    ((4, 3, 5), ((2, 7), (2, 7)), r"h0 has shape \(2, 7\)"),
])
def test_lstm_module_shape_errors(shape, state, match):
    layer = nn.LSTM(5, 7)
    x = Tensor(np.zeros(shape, np.float32))
    st_ = None if state is None else tuple(Tensor(np.zeros(s, np.float32)) for s in state)
    with pytest.raises(ValueError, match=match):
        layer(x, st_)


def test_kernel_runs_as_plain_python():
    # NUMBA_DISABLE_JIT=1 turns the kernels into Python a debugger can step
    # through; the dtype-dispatched tanh must still work there.
    code = ("import numpy as np; from minips.kernels import lstm as k, reference as r; "
            "a = [np.random.default_rng(0).uniform(-1, 1, s).astype(np.float32) "
            "for s in [(3, 2, 4), (20, 4), (20, 5), (20,)]]; "
            "f = k.lstm_forward(*a); g = r.lstm_forward(*a); "
            "d = k.lstm_backward(f[0], None, None, *a[:3], None, None, *f); "
            "e = r.lstm_backward(f[0], None, None, *a[:3], None, None, *f); "
            "print(max(abs(u - v).max() for u, v in zip(f + d, g + e)))")
    env = dict(os.environ, NUMBA_DISABLE_JIT="1")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert float(out.stdout) < 1e-5


# --- Embedding --------------------------------------------------------------------------
def test_embedding_lookup_and_accumulating_backward():
    emb = nn.Embedding(6, 3)
    ids = np.array([[1, 4, 1], [0, 1, 5]])
    out = emb(ids)
    assert out.shape == (2, 3, 3)
    np.testing.assert_array_equal(out.data[0, 2], emb.weight.data[1])
    out.sum().backward()
    counts = np.bincount(ids.ravel(), minlength=6).astype(np.float32)
    np.testing.assert_array_equal(emb.weight.grad, np.repeat(counts[:, None], 3, axis=1))
    assert not emb.weight.grad[[2, 3]].any()  # never looked up: exactly zero


def test_embedding_gradcheck():
    w = np.random.default_rng(2).standard_normal((5, 4))
    ids = np.array([[0, 3, 3], [4, 0, 1]])
    gradcheck(lambda t: EmbeddingFunction.apply(t, ids=ids), [w])


@pytest.mark.parametrize("ids, match", [
    (np.array([1, 6]), r"Embedding\(6, 3\): token id 6 is outside \[0, 6\)"),
    (np.array([-1, 2]), r"token id -1 is outside"),
    (np.array([0.0, 1.0]), r"must be integers"),
])
def test_embedding_bad_ids(ids, match):
    with pytest.raises(ValueError, match=match):
        nn.Embedding(6, 3)(ids)


# --- masked sequence cross-entropy ----------------------------------------------------------
def test_sequence_cross_entropy_ignores_padding():
    r = np.random.default_rng(5)
    logits = r.standard_normal((4, 3, 7))
    targets = np.array([[2, 5, 1], [3, 0, 6], [0, 0, 4], [0, 0, 0]])  # 0 = <pad>
    loss = nn.sequence_cross_entropy(Tensor(logits), targets)
    keep = targets != 0
    want = nn.cross_entropy(Tensor(logits[keep]), targets[keep]).data
    np.testing.assert_allclose(loss.data, want, rtol=1e-12)
    # Changing logits at padded positions changes nothing.
    logits2 = logits.copy()
    logits2[~keep] += 100 * r.standard_normal((int((~keep).sum()), 7))
    np.testing.assert_allclose(nn.sequence_cross_entropy(Tensor(logits2), targets).data, want, rtol=1e-12)


def test_sequence_cross_entropy_gradcheck_and_zero_grad_on_padding():
    r = np.random.default_rng(6)
    targets = np.array([[2, 0], [1, 3], [0, 0]])
    logits = r.standard_normal((3, 2, 4))
    # (reshaped to 1 element: a 0-d output trips a reduction bug fixed on main)
    gradcheck(lambda z: nn.sequence_cross_entropy(z, targets, pad_id=0).reshape((1,)), [logits])
    t = Tensor(logits, requires_grad=True)
    nn.sequence_cross_entropy(t, targets).backward()
    assert not t.grad[targets == 0].any()


@pytest.mark.parametrize("targets, match", [
    (np.zeros((3, 2), np.int64), "every target is padding"),
    (np.ones((2, 3), np.int64), r"need targets of shape \(3, 2\)"),
    (np.full((3, 2), 9), r"target token id 9 is outside \[0, 4\)"),
    (np.ones((3, 2)), "must be integer"),
])
def test_sequence_cross_entropy_errors(targets, match):
    with pytest.raises(ValueError, match=match):
        nn.sequence_cross_entropy(Tensor(np.zeros((3, 2, 4))), targets)
