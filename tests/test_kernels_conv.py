"""conv2d kernels against their NumPy twins (kernels/reference.py) on random
shapes: odd sizes, batch 1, one channel, padding > 0, strides, non-square
kernels, float32 and float64, both the im2col and the direct path."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minips.kernels import conv
from minips.kernels import reference as ref
from minips.kernels.layout import is_channels_last

SETTINGS = settings(max_examples=30, deadline=None)
TOL = {np.float32: dict(rtol=2e-4, atol=2e-4), np.float64: dict(rtol=1e-10, atol=1e-10)}


@st.composite
def conv_cases(draw):
    N, C, K = draw(st.integers(1, 3)), draw(st.integers(1, 5)), draw(st.integers(1, 4))
    R, S = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    sh, sw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    ph, pw = draw(st.integers(0, 2)), draw(st.integers(0, 2))
    H = draw(st.integers(max(1, R - 2 * ph), 9))
    W = draw(st.integers(max(1, S - 2 * pw), 9))
    return (N, C, H, W), (K, C, R, S), (sh, sw), (ph, pw), draw(st.integers(0, 2**31))


def _arrays(x_shape, w_shape, seed, dtype):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(x_shape).astype(dtype)
    w = rng.standard_normal(w_shape).astype(dtype)
    b = rng.standard_normal(w_shape[0]).astype(dtype)
    return x, w, b, rng


def _check_conv(x_shape, w_shape, stride, padding, seed, dtype, direct):
    x, w, b, rng = _arrays(x_shape, w_shape, seed, dtype)
    y, saved = conv.conv2d_forward(x, w, b, stride, padding, direct=direct)
    assert y.dtype == dtype
    np.testing.assert_allclose(y, ref.conv2d_forward(x, w, b, stride, padding), **TOL[dtype])
    gy = rng.standard_normal(y.shape).astype(dtype)
    gx, gw, gb = conv.conv2d_backward(gy, w, saved)
    gw_ref, gb_ref = ref.conv2d_backward_weight(gy, x, w.shape, stride, padding)
    np.testing.assert_allclose(gx, ref.conv2d_backward_data(gy, w, x.shape, stride, padding), **TOL[dtype])
    np.testing.assert_allclose(gw, gw_ref, **TOL[dtype])
    np.testing.assert_allclose(gb, gb_ref, **TOL[dtype])
    assert gx.dtype == gw.dtype == gb.dtype == dtype


@SETTINGS
@given(conv_cases())
@pytest.mark.parametrize("block_rows", [0, 1, 20])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_conv_im2col_path_matches_twin(dtype, block_rows, case):
    # block_rows: one block (0), one image per block (1), or blocks of a few images
    before = conv.BLOCK_ROWS, conv.BLOCK_BYTES
    conv.BLOCK_ROWS, conv.BLOCK_BYTES = block_rows, 0
    try:
        _check_conv(*case, dtype, direct=False)
    finally:
        conv.BLOCK_ROWS, conv.BLOCK_BYTES = before


@SETTINGS
@given(conv_cases())
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_conv_direct_path_matches_twin(dtype, case):
    x_shape, w_shape, _, padding, seed = case
    _check_conv(x_shape, w_shape, 1, padding, seed, dtype, direct=True)


@pytest.mark.parametrize("x_shape,w_shape,stride,padding", [
    ((1, 1, 28, 28), (32, 1, 3, 3), 1, 1),      # batch 1, one channel: the ConvNet's first layer
    ((2, 32, 7, 7), (8, 32, 3, 3), 1, 1),       # many channels: im2col by default
    ((3, 3, 11, 13), (4, 3, 5, 2), (2, 3), (2, 0)),  # odd sizes, non-square kernel and stride
    ((1, 2, 5, 5), (3, 2, 5, 5), 1, 2),         # kernel as large as the input, padding 2
    ((2, 4, 6, 6), (5, 4, 1, 1), 1, 0),         # 1x1 convolution
])
def test_conv_edge_cases_default_path(x_shape, w_shape, stride, padding):
    _check_conv(x_shape, w_shape, stride, padding, 7, np.float32, direct=None)


def test_default_path_choice(monkeypatch):
    # the default (DIRECT_MAX_CRS = 0, measured in issue 30): im2col + BLAS everywhere
    assert not conv.use_direct(conv.geometry((4, 1, 28, 28), (32, 1, 3, 3), 1, 1))
    monkeypatch.setattr(conv, "DIRECT_MAX_CRS", 27)
    assert conv.use_direct(conv.geometry((4, 1, 28, 28), (32, 1, 3, 3), 1, 1))
    assert conv.use_direct(conv.geometry((4, 3, 32, 32), (64, 3, 3, 3), 1, 1))
    assert not conv.use_direct(conv.geometry((4, 32, 14, 14), (64, 32, 3, 3), 1, 1))
    assert not conv.use_direct(conv.geometry((4, 1, 28, 28), (32, 1, 3, 3), 2, 1))  # stride 2


def test_backward_skips_unneeded_gradients():
    x, w, b, _ = _arrays((2, 3, 6, 6), (4, 3, 3, 3), 0, np.float32)
    y, saved = conv.conv2d_forward(x, w, b, 1, 1)
    gx, gw, gb = conv.conv2d_backward(np.ones_like(y), w, saved, need_x=False)
    assert gx is None and gw is not None and gb is not None
    gx, gw, gb = conv.conv2d_backward(np.ones_like(y), w, saved, need_w=False)
    assert gx is not None and gw is None and gb is None


@SETTINGS
@given(conv_cases())
def test_im2col_and_col2im_match_twins_and_are_adjoint(case):
    x_shape, w_shape, stride, padding, seed = case
    x, _, _, rng = _arrays(x_shape, w_shape, seed, np.float64)
    R, S = w_shape[2:]
    g = conv.geometry(x_shape, w_shape, stride, padding)
    cols = conv.im2col(x, g)
    np.testing.assert_array_equal(cols, ref.im2col(x, R, S, stride, padding))
    c = rng.standard_normal(cols.shape)
    back = conv.col2im(c, g)
    np.testing.assert_allclose(back, ref.col2im(c, x_shape, R, S, stride, padding), rtol=1e-12, atol=1e-12)
    # <im2col(x), c> == <x, col2im(c)>: col2im is the transpose of im2col,
    # which is why it computes the input gradient.
    assert np.isclose(np.vdot(cols, c), np.vdot(x, back), rtol=1e-10)
    # the channels-last forms of the training path: the same entries, one row per
    # output pixel in (r, s, c) order, checked against the twin rearranged
    C = x_shape[1]
    def to_rows(a):
        return a.reshape(C, R, S, -1).transpose(3, 1, 2, 0).reshape(-1, R * S * C)
    np.testing.assert_array_equal(conv.im2col_nhwc(x, g), to_rows(ref.im2col(x, R, S, stride, padding)))
    back_nhwc = conv.col2im_nhwc(to_rows(c), g)
    assert back_nhwc.shape == x.shape and is_channels_last(back_nhwc)
    np.testing.assert_allclose(back_nhwc, ref.col2im(c, x_shape, R, S, stride, padding), rtol=1e-12, atol=1e-12)


# The channels-last patch build copies, for C <= THIN_C, each tap row's S*C values as
# one run; the border is handled apart (tap rows in the padding, columns whose run crosses an
# edge). Every branch on the thin first layers' inputs (C = 1 and 3), strides 1 and
# 2, padding 0, 1, 2, rectangular kernels, and inputs so narrow that no column is
# interior or no tap row is inside, against the twin; then the whole conv path.
BORDER_CASES = [
    # (N, C, H, W), (R, S), stride, padding
    ((2, 1, 28, 28), (3, 3), 1, 1),              # the ConvNet's first layer
    ((2, 3, 9, 8), (3, 3), 1, 0),
    ((2, 3, 8, 9), (3, 3), 2, 1),
    ((1, 1, 7, 10), (3, 3), 2, 2),
    ((2, 3, 6, 7), (2, 5), (1, 2), (0, 2)),     # rectangular kernel and stride
    ((1, 1, 7, 5), (5, 2), (2, 1), (2, 1)),
    ((2, 3, 5, 6), (3, 1), 1, (1, 0)),
    ((1, 1, 2, 2), (3, 3), 1, 2),               # no interior column, no full tap row
    ((1, 3, 1, 4), (3, 3), (1, 2), (2, 1)),     # one input row: at most one tap row inside
    ((2, 1, 5, 5), (5, 5), 2, 2),
    ((1, 4, 5, 5), (3, 3), 3, 1),               # stride larger than the kernel's reach
    ((2, 6, 7, 6), (3, 2), (2, 1), (1, 2)),     # more than THIN_C channels: the pixel loop
]


@pytest.mark.parametrize("x_shape,ks,stride,padding", BORDER_CASES)
def test_im2col_nhwc_borders_match_twin(x_shape, ks, stride, padding):
    C = x_shape[1]
    R, S = ks
    x = np.random.default_rng(1).standard_normal(x_shape)
    g = conv.geometry(x_shape, (2, C, R, S), stride, padding)
    want = ref.im2col(x, R, S, stride, padding).reshape(C, R, S, -1).transpose(3, 1, 2, 0).reshape(-1, R * S * C)
    np.testing.assert_array_equal(conv.im2col_nhwc(x, g), want)
    # the NCHW and the channels-last input give the same rows
    xl = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    np.testing.assert_array_equal(conv.im2col_nhwc(xl, g), want)


@pytest.mark.parametrize("x_shape,ks,stride,padding", BORDER_CASES)
@pytest.mark.parametrize("block_rows", [0, 1])
def test_conv_borders_match_twin(x_shape, ks, stride, padding, block_rows, monkeypatch):
    monkeypatch.setattr(conv, "BLOCK_ROWS", block_rows)
    monkeypatch.setattr(conv, "BLOCK_BYTES", 0)
    _check_conv(x_shape, (3, x_shape[1]) + ks, stride, padding, 5, np.float64, direct=False)


def test_no_bias_equals_zero_bias():
    x, w, b, _ = _arrays((2, 2, 5, 5), (3, 2, 3, 3), 3, np.float32)
    y0, _ = conv.conv2d_forward(x, w, None, 1, 1)
    y1, _ = conv.conv2d_forward(x, w, np.zeros_like(b), 1, 1)
    np.testing.assert_array_equal(y0, y1)


@pytest.mark.parametrize("x_shape,w_shape,stride,padding,msg", [
    ((2, 3, 5, 5), (4, 2, 3, 3), 1, 0, "x has 3 channels, w expects 2"),
    ((2, 3, 5), (4, 3, 3, 3), 1, 0, "must be"),
    ((2, 3, 2, 2), (4, 3, 3, 3), 1, 0, "larger than the padded input"),
    ((2, 3, 5, 5), (4, 3, 3, 3), 0, 0, "stride >= 1"),
    ((2, 3, 5, 5), (4, 3, 3, 3), 1, -1, "padding >= 0"),
])
def test_geometry_errors(x_shape, w_shape, stride, padding, msg):
    with pytest.raises(ValueError, match=msg):
        conv.geometry(x_shape, w_shape, stride, padding)


def test_dtype_errors():
    x = np.zeros((1, 1, 4, 4), np.float32)
    with pytest.raises(TypeError, match="mixed dtypes"):
        conv.conv2d_forward(x, np.zeros((1, 1, 3, 3), np.float64))
    with pytest.raises(TypeError, match="float32 or float64"):
        conv.conv2d_forward(x.astype(np.int32), np.zeros((1, 1, 3, 3), np.int32))
    with pytest.raises(ValueError, match="direct kernel needs stride 1"):
        conv.conv2d_forward(x, np.zeros((1, 1, 3, 3), np.float32), stride=2, direct=True)
