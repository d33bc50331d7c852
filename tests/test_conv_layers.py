"""Conv2d, MaxPool2d, AvgPool2d and Flatten: gradient checks (float64), shape
errors that name the layer and dimension, and the ConvNet (shapes, registry,
a short training run whose loss goes down)."""
import numba
import numpy as np
import pytest

from minips import random as mrandom
from minips.gradcheck import gradcheck
from minips.models import ConvNet, build_model
from minips.nn import AvgPool2d, Conv2d, Flatten, MaxPool2d
from minips.nn.conv import conv2d
from minips.optim import SGD
from minips.tensor import Tensor


@pytest.fixture(autouse=True)
def one_thread():
    """These tests make hundreds of tiny kernel calls (finite differences): one
    thread avoids waiting on a busy machine's scheduler at every parallel loop.
    The kernel tests (test_kernels_*.py) keep the default threads."""
    before = numba.get_num_threads()
    numba.set_num_threads(1)
    yield
    numba.set_num_threads(before)


def _float64_params(module):
    for p in module.parameters():
        p.data = p.data.astype(np.float64)
    return module


@pytest.mark.parametrize("cin,cout,kernel,stride,padding,bias,shape", [
    (1, 3, 3, 1, 1, True, (2, 1, 5, 5)),          # direct path, batch 2, one channel
    (3, 2, (3, 2), (2, 1), (1, 0), True, (1, 3, 6, 5)),   # im2col path, non-square, batch 1
    (4, 2, 2, 1, 0, False, (2, 4, 4, 3)),          # no bias
])
def test_conv2d_gradcheck(cin, cout, kernel, stride, padding, bias, shape):
    mrandom.seed(1)
    m = _float64_params(Conv2d(cin, cout, kernel, stride, padding, bias=bias))
    x = Tensor(np.random.default_rng(2).standard_normal(shape), requires_grad=True)
    params = [m.weight] + ([m.bias] if bias else [])
    gradcheck(lambda x, *p: m(x), [x, *params])


def test_conv2d_function_gradcheck_bias_only():
    rng = np.random.default_rng(3)
    x = Tensor(rng.standard_normal((1, 2, 4, 4)))                  # constants: no gradient
    w = Tensor(rng.standard_normal((3, 2, 3, 3)))
    b = Tensor(rng.standard_normal(3), requires_grad=True)
    gradcheck(lambda b: conv2d(x, w, b, 1, 1), [b])


@pytest.mark.parametrize("layer", [MaxPool2d(2), MaxPool2d(3, stride=2), MaxPool2d((2, 1)),
                                   AvgPool2d(2), AvgPool2d((3, 2), stride=1)])
def test_pooling_gradcheck(layer):
    # A permutation: distinct values, so no max is tied within the finite-difference step.
    x = np.random.default_rng(4).permutation(2 * 3 * 7 * 6).reshape(2, 3, 7, 6) / 10.0
    gradcheck(layer, [x])


def test_flatten_gradcheck():
    gradcheck(Flatten(), [np.random.default_rng(5).standard_normal((2, 3, 2, 2))])


def test_layer_output_shapes():
    x = Tensor(np.zeros((2, 3, 11, 8), np.float32))
    assert Conv2d(3, 5, (3, 2), stride=2, padding=1)(x).shape == (2, 5, 6, 5)
    assert MaxPool2d(2)(x).shape == (2, 3, 5, 4)
    assert AvgPool2d(3, stride=1)(x).shape == (2, 3, 9, 6)


@pytest.mark.parametrize("layer,shape,msg", [
    (Conv2d(32, 64, 3, padding=1), (2, 3, 8, 8),
     r"Conv2d\(32->64\): input has 3 channels at dim 1, expected 32"),
    (Conv2d(1, 4, 3), (2, 28, 28), r"Conv2d\(1->4\): input must have 4 dimensions"),
    (Conv2d(1, 4, 5), (2, 1, 3, 8), r"Conv2d\(1->4\): input height 3 at dim 2"),
    (Conv2d(1, 4, (1, 5), padding=1), (2, 1, 8, 2), r"Conv2d\(1->4\): input width 2 at dim 3"),
    (MaxPool2d(2), (2, 3, 1, 8), r"MaxPool2d\(2\): input height 1 at dim 2 is smaller than the window"),
    (AvgPool2d(3, stride=1), (2, 3, 8), r"AvgPool2d\(3, stride=\(1, 1\)\): input must have 4 dimensions"),
])
def test_shape_errors_name_layer_and_dimension(layer, shape, msg):
    with pytest.raises(ValueError, match=msg):
        layer(Tensor(np.zeros(shape, np.float32)))


def test_dtype_mismatch_is_explained():
    with pytest.raises(TypeError, match=r"Conv2d\(1->2\): input dtype float64 differs"):
        Conv2d(1, 2, 3)(Tensor(np.zeros((1, 1, 4, 4))))


def test_bad_constructor_arguments():
    with pytest.raises(ValueError, match="stride must be an int >= 1"):
        Conv2d(1, 2, 3, stride=0)
    with pytest.raises(ValueError, match="kernel_size"):
        MaxPool2d((2, 2, 2))


def test_convnet_shapes_and_registry():
    mrandom.seed(0)
    m = ConvNet()
    assert m.num_parameters() == (32 * 9 + 32) + (64 * 32 * 9 + 64) + (3136 * 128 + 128) + (128 * 10 + 10)
    assert m(Tensor(np.zeros((3, 1, 28, 28), np.float32))).shape == (3, 10)

    class Task:
        kind, input_shape, num_classes = "classification", (1, 28, 28), 10
    assert isinstance(build_model("convnet", Task()), ConvNet)
    Task.kind = "captioning"
    with pytest.raises(ValueError, match="needs an image classification"):
        build_model("convnet", Task())


def test_convnet_short_training_lowers_the_loss():
    """A few SGD steps on one fixed batch: the loss must fall clearly."""
    mrandom.seed(0)
    rng = np.random.default_rng(0)
    # Two easy classes: bright top half vs bright bottom half, plus noise.
    y = rng.integers(0, 2, 32)
    x = rng.standard_normal((32, 1, 28, 28)).astype(np.float32) * 0.3
    x[y == 0, :, :14] += 1.0
    x[y == 1, :, 14:] += 1.0
    model = ConvNet(num_classes=2, dropout=0.0)
    opt = SGD(model.parameters(), lr=0.02, momentum=0.9)
    losses = []
    for _ in range(6):
        loss = model.loss((x, y))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.data))
    assert all(np.isfinite(losses))
    assert losses[-1] < 0.5 * losses[0], losses
