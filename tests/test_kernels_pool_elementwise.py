"""Pooling, ReLU and the fused loss kernels against their NumPy twins."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minips.kernels import elementwise as kew
from minips.kernels import loss as kloss
from minips.kernels import pool as kpool
from minips.kernels import reference as ref

SETTINGS = settings(max_examples=30, deadline=None)


@st.composite
def pool_cases(draw):
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    sh, sw = draw(st.integers(1, 3)), draw(st.integers(1, 3))   # stride < kernel: overlapping windows
    shape = (draw(st.integers(1, 3)), draw(st.integers(1, 4)),
             draw(st.integers(kh, 9)), draw(st.integers(kw, 9)))
    return shape, (kh, kw), (sh, sw), draw(st.integers(0, 2**31))


@SETTINGS
@given(pool_cases())
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_maxpool_matches_twin(dtype, case):
    shape, kernel, stride, seed = case
    rng = np.random.default_rng(seed)
    # Values from a small set, so ties happen and the tie rule is tested too.
    x = rng.integers(-3, 4, shape).astype(dtype)
    y, argmax = kpool.maxpool2d_forward(x, kernel, stride)
    y_ref, argmax_ref = ref.maxpool2d_forward(x, kernel, stride)
    np.testing.assert_array_equal(y, y_ref)
    np.testing.assert_array_equal(argmax, argmax_ref)
    gy = rng.standard_normal(y.shape).astype(dtype)
    np.testing.assert_allclose(kpool.maxpool2d_backward(gy, argmax, shape),
                               ref.maxpool2d_backward(gy, argmax_ref, shape), rtol=1e-6, atol=1e-6)


@SETTINGS
@given(pool_cases())
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_avgpool_matches_twin(dtype, case):
    shape, kernel, stride, seed = case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(dtype)
    y = kpool.avgpool2d_forward(x, kernel, stride)
    assert y.dtype == dtype
    np.testing.assert_allclose(y, ref.avgpool2d_forward(x, kernel, stride), rtol=1e-5, atol=1e-6)
    gy = rng.standard_normal(y.shape).astype(dtype)
    np.testing.assert_allclose(kpool.avgpool2d_backward(gy, shape, kernel, stride),
                               ref.avgpool2d_backward(gy, shape, kernel, stride), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape", [(1, 1, 2, 2), (2, 3, 7, 9), (3, 2, 28, 28)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_2x2_stride_2_fast_paths_match_twin(shape, dtype):
    rng = np.random.default_rng(sum(shape))
    x = rng.integers(-2, 3, shape).astype(dtype)                  # many ties
    y, argmax = kpool.maxpool2d_forward(x, 2, 2)
    y_ref, argmax_ref = ref.maxpool2d_forward(x, 2, 2)
    np.testing.assert_array_equal(y, y_ref)
    np.testing.assert_array_equal(argmax, argmax_ref)
    np.testing.assert_allclose(kpool.avgpool2d_forward(x, 2, 2), ref.avgpool2d_forward(x, 2, 2), rtol=1e-6)


def test_maxpool_ties_pick_first_in_window():
    x = np.zeros((1, 1, 4, 4), np.float32)
    _, argmax = kpool.maxpool2d_forward(x, 2, 2)
    np.testing.assert_array_equal(argmax[0, 0], [[0, 2], [8, 10]])   # top-left of each window


def test_maxpool_drops_incomplete_windows():
    x = np.arange(25, dtype=np.float32).reshape(1, 1, 5, 5)
    y, _ = kpool.maxpool2d_forward(x, 2, 2)
    np.testing.assert_array_equal(y[0, 0], [[6, 8], [16, 18]])


@pytest.mark.parametrize("shape,kernel,stride,msg", [
    ((1, 1, 3, 3), 4, 4, "larger than the input"),
    ((1, 3, 3), 2, 2, "must be"),
    ((1, 1, 3, 3), 0, 1, ">= 1"),
])
def test_pool_errors(shape, kernel, stride, msg):
    with pytest.raises(ValueError, match=msg):
        kpool.maxpool2d_forward(np.zeros(shape, np.float32), kernel, stride)


@SETTINGS
@given(st.lists(st.integers(1, 7), min_size=1, max_size=4), st.integers(0, 2**31))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_relu_matches_twin(dtype, shape, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(dtype)
    x.flat[0] = 0.0                             # the kink: gradient 0 there
    y = kew.relu_forward(x)
    np.testing.assert_array_equal(y, ref.relu_forward(x))
    gy = rng.standard_normal(shape).astype(dtype)
    np.testing.assert_array_equal(kew.relu_backward(y, gy), ref.relu_backward(y, gy))


def test_relu_non_contiguous_input_and_nan():
    x = np.arange(-6, 6, dtype=np.float32).reshape(3, 4).T       # not C-contiguous
    np.testing.assert_array_equal(kew.relu_forward(x), np.maximum(x, 0))
    assert np.isnan(kew.relu_forward(np.array([np.nan], np.float32))[0])   # NaN is not hidden


@SETTINGS
@given(st.integers(1, 9), st.integers(2, 12), st.integers(0, 2**31))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax_xent_matches_twin(dtype, n, c, seed):
    rng = np.random.default_rng(seed)
    z = (5 * rng.standard_normal((n, c))).astype(dtype)
    z[0, 0] = 80                                 # large logit: must not overflow
    y = rng.integers(0, c, n)
    loss, probs = kloss.softmax_xent_forward(z, y)
    loss_ref, probs_ref = ref.softmax_xent_forward(z, y)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    assert np.isfinite(loss) and np.isclose(loss, loss_ref, rtol=tol, atol=tol)
    np.testing.assert_allclose(probs, probs_ref, rtol=tol, atol=tol)
    np.testing.assert_allclose(kloss.softmax_xent_backward(probs, y, 0.5),
                               ref.softmax_xent_backward(probs_ref, y, 0.5), rtol=tol, atol=tol)
