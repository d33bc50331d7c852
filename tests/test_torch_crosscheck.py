"""Cross-checks against PyTorch (``torch.nn.functional``): conv2d, max and
average pooling, forward and backward, for shapes with strides, padding,
non-square kernels and odd sizes.

PyTorch is never a dependency of minips: these tests skip where it is not
installed; CI (.ci/run) installs the CPU wheel so that they run there, as the
LSTM's (tests/test_lstm.py) do.
"""
import numpy as np
import pytest

from minips.nn import conv as nnconv
from minips.tensor import Tensor

torch = pytest.importorskip("torch")
F = torch.nn.functional

# (N, C, H, W), (K, R, S), stride, padding
CONV_CASES = [
    ((2, 3, 8, 8), (4, 3, 3), 1, 0),
    ((1, 2, 9, 7), (3, 3, 3), 2, 1),          # odd sizes, stride 2, padding 1
    ((2, 1, 11, 10), (2, 5, 3), (2, 1), (2, 1)),  # non-square kernel, stride and padding pairs
    ((3, 4, 5, 6), (5, 1, 1), 1, 0),          # 1x1 convolution
    ((1, 3, 7, 7), (2, 4, 4), 3, 2),          # kernel larger than the stride, cut-off border
]


@pytest.mark.parametrize("xs,ks,stride,padding", CONV_CASES)
def test_conv2d_matches_torch(xs, ks, stride, padding):
    rng = np.random.default_rng(sum(xs) + sum(ks))
    K, R, S = ks
    x = rng.standard_normal(xs)
    w = rng.standard_normal((K, xs[1], R, S))
    b = rng.standard_normal(K)
    xm, wm, bm = (Tensor(a.copy(), requires_grad=True) for a in (x, w, b))
    y = nnconv.conv2d(xm, wm, bm, stride=stride, padding=padding)
    xt, wt, bt = (torch.from_numpy(a.copy()).requires_grad_(True) for a in (x, w, b))
    yt = F.conv2d(xt, wt, bt, stride=stride, padding=padding)
    np.testing.assert_allclose(y.data, yt.detach().numpy(), rtol=1e-10, atol=1e-10)
    gy = rng.standard_normal(y.shape)
    (y * Tensor(gy)).sum().backward()
    yt.backward(torch.from_numpy(gy))
    for mine, theirs, name in ((xm, xt, "x"), (wm, wt, "weight"), (bm, bt, "bias")):
        np.testing.assert_allclose(mine.grad, theirs.grad.numpy(), rtol=1e-9, atol=1e-9, err_msg=name)


# (N, C, H, W), kernel, stride (None: = kernel)
POOL_CASES = [
    ((2, 3, 8, 8), 2, None),
    ((1, 2, 9, 7), 3, 2),          # overlapping windows, odd sizes
    ((2, 1, 7, 9), (2, 3), (1, 2)),  # non-square kernel and stride
    ((1, 1, 5, 5), 2, None),       # the last row and column fall outside every window
    ((3, 2, 6, 6), 3, 1),
]


@pytest.mark.parametrize("xs,kernel,stride", POOL_CASES)
@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pools_match_torch(kind, xs, kernel, stride):
    rng = np.random.default_rng(sum(xs))
    x = rng.standard_normal(xs)  # continuous values: no ties for the maximum
    mine_fn = nnconv.max_pool2d if kind == "max" else nnconv.avg_pool2d
    torch_fn = F.max_pool2d if kind == "max" else F.avg_pool2d
    xm = Tensor(x.copy(), requires_grad=True)
    y = mine_fn(xm, kernel, stride)
    xt = torch.from_numpy(x.copy()).requires_grad_(True)
    yt = torch_fn(xt, kernel, stride if stride is not None else kernel)
    np.testing.assert_allclose(y.data, yt.detach().numpy(), rtol=1e-12, atol=1e-12)
    gy = rng.standard_normal(y.shape)
    (y * Tensor(gy)).sum().backward()
    yt.backward(torch.from_numpy(gy))
    np.testing.assert_allclose(xm.grad, xt.grad.numpy(), rtol=1e-12, atol=1e-12)


# Conv2d, ReLU, MaxPool2d in a Sequential: computed as one Function (the bias,
# ReLU and pooling fused after the product, their backward in one pass).
# (N, C, H, W), (K, R, S), stride, padding, pool window (None: conv + ReLU only)
FUSED_CASES = [
    ((2, 1, 8, 8), (4, 3, 3), 1, 1, 2),              # C*R*S = 9: direct forward when allowed
    ((2, 3, 9, 7), (5, 3, 3), 1, 1, 2),              # C*R*S = 27, odd sizes: the last row/column pooled away
    ((9, 2, 12, 12), (3, 3, 3), 1, 1, 2),            # 9 images of 144 pixels: im2col in several blocks
    ((2, 4, 9, 11), (3, 3, 5), (2, 1), (1, 2), (2, 3)),  # im2col, rectangular kernel, stride and window
    ((1, 5, 7, 7), (6, 2, 2), 1, 0, 3),              # even kernel, 3x3 window that leaves a row and column
    ((2, 6, 6, 6), (4, 1, 1), 1, 0, None),           # 1x1, ReLU only
    ((1, 2, 10, 9), (3, 4, 3), 3, 2, None),          # stride 3, ReLU only
]


@pytest.mark.parametrize("direct_max_crs", [0, 27])
@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("xs,ks,stride,padding,pool", FUSED_CASES)
def test_conv_relu_maxpool_fused_matches_torch(xs, ks, stride, padding, pool, channels_last, direct_max_crs,
                                               monkeypatch):
    from minips.kernels import conv as kconv
    from minips.nn import ReLU, Sequential
    monkeypatch.setattr(kconv, "DIRECT_MAX_CRS", direct_max_crs)   # the direct forward, or im2col always
    rng = np.random.default_rng(sum(xs) + sum(ks) + 7)
    K, R, S = ks
    x = rng.standard_normal(xs)
    w = rng.standard_normal((K, xs[1], R, S))
    b = rng.standard_normal(K)
    conv = nnconv.Conv2d(xs[1], K, (R, S), stride=stride, padding=padding)
    conv.weight.data, conv.bias.data = w.copy(), b.copy()
    layers = [conv, ReLU()] + ([nnconv.MaxPool2d(pool)] if pool else [])
    net = Sequential(*layers)
    xin = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2) if channels_last else x.copy()
    xm = Tensor(xin, requires_grad=True)
    y = net(xm)
    # the whole Sequential was one Function (the fused kernel), not three
    assert type(y._fn).__name__ == "Conv2dFunction", type(y._fn)
    xt, wt, bt = (torch.from_numpy(a.copy()).requires_grad_(True) for a in (x, w, b))
    yt = F.relu(F.conv2d(xt, wt, bt, stride=stride, padding=padding))
    if pool:
        yt = F.max_pool2d(yt, pool)
    np.testing.assert_allclose(y.data, yt.detach().numpy(), rtol=1e-10, atol=1e-10)
    gy = rng.standard_normal(y.shape)
    (y * Tensor(gy)).sum().backward()
    yt.backward(torch.from_numpy(gy))
    for mine, theirs, name in ((xm.grad, xt, "x"), (conv.weight.grad, wt, "weight"), (conv.bias.grad, bt, "bias")):
        np.testing.assert_allclose(mine, theirs.grad.numpy(), rtol=1e-9, atol=1e-9, err_msg=name)
    g = kconv.geometry(xs, w.shape, stride, padding)
    assert kconv.use_direct(g) == (xs[1] * R * S <= direct_max_crs and stride == 1)   # the path taken
