"""Convolution and pooling layers (NCHW shapes, channels-last memory).

Each layer is a thin :class:`~minips.nn.Module` around an autograd
:class:`~minips.autograd.Function` whose forward and backward call the Numba
kernels of :mod:`minips.kernels.conv` and :mod:`minips.kernels.pool` (see
``docs/kernels.md`` for how they work). The functional forms
(:func:`conv2d`, :func:`max_pool2d`, :func:`avg_pool2d`) take Tensors.

Inputs and outputs have NCHW shapes, (N, C, H, W), whatever their memory
order; the layers return channels-last arrays (:mod:`minips.kernels.layout`)
and the next layer reads them without a copy. Weights are (K, C, R, S).

Each layer instance keeps a small arena of work buffers per thread
(:mod:`minips.kernels.arena`), so a training step allocates none of its
large arrays afresh. Inside a :class:`~minips.nn.Sequential`, a
:class:`Conv2d` followed by :class:`~minips.nn.ReLU` (and by a
non-overlapping :class:`MaxPool2d`) computes all of them in one Function:
the same values and gradients, with the bias, ReLU and pooling done in one
pass over the product's output (:meth:`Conv2d.forward_with_next`).

Modules check their input and raise ``ValueError`` naming the layer and the
dimension, e.g. ``Conv2d(32->64): input has 3 channels at dim 1, expected 32``.
All layers work in float32 (training) and float64 (gradient checks): the
kernels are compiled for both.
"""
from __future__ import annotations

import numpy as np

from ..autograd import Function
from ..kernels import conv as kconv
from ..kernels import pool as kpool
from ..kernels import reference as kref
from ..kernels import reference_kernels
from ..kernels.arena import NO_ARENA, arena_for
from . import init
from .layers import ReLU
from .module import Module, Parameter

__all__ = ["conv2d", "max_pool2d", "avg_pool2d", "Conv2d", "MaxPool2d", "AvgPool2d",
           "Conv2dFunction", "MaxPool2dFunction", "AvgPool2dFunction"]


def _pair(v, what: str, minimum: int):
    t = (v, v) if isinstance(v, (int, np.integer)) else tuple(v)
    if len(t) != 2 or any(not isinstance(i, (int, np.integer)) or i < minimum for i in t):
        raise ValueError(f"{what} must be an int >= {minimum} or a pair of them, got {v!r}")
    return int(t[0]), int(t[1])


# --- autograd Functions ----------------------------------------------------------
class Conv2dFunction(Function):
    """y = conv2d(x, w) + b, optionally followed by ReLU and max pooling
    (``relu``, ``pool``: computed in one pass, see :class:`Conv2d`); gradients
    for x, w and b (any may be skipped). ``arena``: where work buffers come
    from (the layer's; the functional form allocates)."""

    def forward(self, x, w, b, *, stride, padding, relu=False, pool=None, arena=NO_ARENA):
        self.w, self.arena = w, arena
        if reference_kernels():  # MINIPS_REFERENCE_KERNELS=1: the readable twins (kernels/reference.py)
            self.saved = {"reference": (x, stride, padding, relu, pool)}
            y = kref.conv2d_forward(x, w, b, stride, padding)
            if relu:
                y = self.relu_out = kref.relu_forward(y)
            if pool is not None:
                self.pre_pool_shape = y.shape
                y, self.argmax = kref.maxpool2d_forward(y, pool, pool)
            return y
        y, self.saved = kconv.conv2d_forward(x, w, b, stride, padding, relu=relu, pool=pool, arena=arena)
        return y

    def backward(self, gy):
        need_x, need_w = self.needs_input_grad[0], self.needs_input_grad[1]
        need_b = self.needs_input_grad[2]
        if "reference" in self.saved:
            x, stride, padding, relu, pool = self.saved["reference"]
            if pool is not None:
                gy = kref.maxpool2d_backward(gy, self.argmax, self.pre_pool_shape)
            if relu:
                gy = kref.relu_backward(self.relu_out, gy)
            gx = kref.conv2d_backward_data(gy, self.w, x.shape, stride, padding) if need_x else None
            gw, gb = kref.conv2d_backward_weight(gy, x, self.w.shape, stride, padding)
        else:
            gx, gw, gb = kconv.conv2d_backward(gy, self.w, self.saved, need_x=need_x,
                                               need_w=need_w or need_b, arena=self.arena)
        return gx, (gw if need_w else None), (gb if need_b else None)


class MaxPool2dFunction(Function):
    """Max over each window; the gradient goes to the window's maximum."""

    def forward(self, x, *, kernel, stride, arena=NO_ARENA):
        self.x_shape, self.arena = x.shape, arena
        if reference_kernels():
            y, self.argmax = kref.maxpool2d_forward(x, kernel, stride)
        else:
            y, self.argmax = kpool.maxpool2d_forward(x, kernel, stride, arena=arena)
        return y

    def backward(self, gy):
        if reference_kernels():
            return kref.maxpool2d_backward(gy, self.argmax, self.x_shape)
        return kpool.maxpool2d_backward(gy, self.argmax, self.x_shape, arena=self.arena)


class AvgPool2dFunction(Function):
    """Mean over each window; the gradient is shared equally by the window."""

    def forward(self, x, *, kernel, stride, arena=NO_ARENA):
        self.x_shape, self.kernel, self.stride, self.arena = x.shape, kernel, stride, arena
        if reference_kernels():
            return kref.avgpool2d_forward(x, kernel, stride)
        return kpool.avgpool2d_forward(x, kernel, stride, arena=arena)

    def backward(self, gy):
        if reference_kernels():
            return kref.avgpool2d_backward(gy, self.x_shape, self.kernel, self.stride)
        return kpool.avgpool2d_backward(gy, self.x_shape, self.kernel, self.stride, arena=self.arena)


# --- functional forms -------------------------------------------------------------
def conv2d(x, weight, bias=None, stride=1, padding=0):
    """2-D convolution (cross-correlation, as in PyTorch) of NCHW ``x``.

    Args:
        x: Tensor (N, C, H, W); weight: Tensor (K, C, R, S); bias: Tensor (K,) or None.
        stride, padding: int or (vertical, horizontal) pair.

    Returns:
        Tensor (N, K, P, Q), ``P = (H + 2*ph - R) // sh + 1`` (likewise Q).

    Raises:
        ValueError: shapes that do not fit (see :func:`minips.kernels.conv.geometry`).
        TypeError: x and weight of different float dtypes.
    """
    return Conv2dFunction.apply(x, weight, bias, stride=stride, padding=padding)


def max_pool2d(x, kernel_size, stride=None):
    """Max pooling of NCHW ``x`` over ``kernel_size`` windows (stride defaults
    to the kernel size: non-overlapping windows). Returns (N, C, P, Q)."""
    return MaxPool2dFunction.apply(x, kernel=kernel_size,
                                   stride=kernel_size if stride is None else stride)


def avg_pool2d(x, kernel_size, stride=None):
    """Average pooling of NCHW ``x``; arguments as :func:`max_pool2d`."""
    return AvgPool2dFunction.apply(x, kernel=kernel_size,
                                   stride=kernel_size if stride is None else stride)


# --- modules ----------------------------------------------------------------------
def _check_image_input(name: str, x, channels: int | None = None):
    """Raise ValueError naming the layer unless x is (N, C, H, W) with C == channels."""
    if x.ndim != 4:
        raise ValueError(f"{name}: input must have 4 dimensions (N, C, H, W), got shape "
                         f"{tuple(x.shape)}; reshape it, e.g. x.reshape(N, 1, 28, 28) for grey images")
    if channels is not None and x.shape[1] != channels:
        raise ValueError(f"{name}: input has {x.shape[1]} channels at dim 1, expected {channels}")


class Conv2d(Module):
    """2-D convolution layer, NCHW.

    Args:
        in_channels (C), out_channels (K): channel counts.
        kernel_size: int or (R, S) pair (square or not).
        stride: int or pair, >= 1 (default 1).
        padding: zero padding, int or pair, >= 0 (default 0); ``kernel_size // 2``
            with stride 1 keeps H and W ("same" size for odd kernels).
        bias: learn a bias per output channel (default True).
        init_mode: ``"kaiming"`` (default, as :class:`~minips.nn.Linear`):
            weights U(-b, b), b = sqrt(6/fan_in), the He et al. (2015) variance
            2/fan_in; or ``"torch"``: b = 1/sqrt(fan_in), PyTorch's default
            (``kaiming_uniform_(a=sqrt(5))``), a third of that variance.
        rng: a ``np.random.Generator``; default the global :mod:`minips.random`.

    Parameters: ``weight`` (K, C, R, S) and ``bias`` (K,), float32, fan_in =
    C*R*S; the bias is U(-1/sqrt(fan_in), 1/sqrt(fan_in)) in both modes.

    Input (N, C, H, W) -> output (N, K, P, Q).

    Raises:
        ValueError: bad sizes at construction; at call time an input that is
            not 4-D, has the wrong number of channels, or is smaller than the
            kernel (the message names the layer and the dimension).
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 bias: bool = True, init_mode: str = "kaiming", rng=None):
        super().__init__()
        name = f"Conv2d({in_channels}->{out_channels})"
        if in_channels < 1 or out_channels < 1:
            raise ValueError(f"{name}: channel counts must be >= 1")
        self.in_channels, self.out_channels = int(in_channels), int(out_channels)
        self.kernel_size = _pair(kernel_size, f"{name}: kernel_size", 1)
        self.stride = _pair(stride, f"{name}: stride", 1)
        self.padding = _pair(padding, f"{name}: padding", 0)
        fan_in = self.in_channels * self.kernel_size[0] * self.kernel_size[1]
        shape = (self.out_channels, self.in_channels) + self.kernel_size
        if init_mode == "kaiming":
            w = init.kaiming_uniform(shape, fan_in, rng)
        elif init_mode == "torch":
            w = init.uniform(shape, 1 / np.sqrt(fan_in), rng)
        else:
            raise ValueError(f"{name}: init_mode must be 'kaiming' or 'torch', got {init_mode!r}")
        self.weight = Parameter(w)
        self.bias = Parameter(init.uniform((self.out_channels,), 1 / np.sqrt(fan_in), rng)) if bias else None

    @property
    def name(self) -> str:
        return f"Conv2d({self.in_channels}->{self.out_channels})"

    def output_shape(self, input_shape):
        """(N, K, P, Q) for an (N, C, H, W) input; raises like :meth:`forward`."""
        (R, S), (sh, sw), (ph, pw) = self.kernel_size, self.stride, self.padding
        N, _, H, W = input_shape
        for dim, size, pad_, k, what in ((2, H, ph, R, "height"), (3, W, pw, S, "width")):
            if size + 2 * pad_ < k:
                raise ValueError(f"{self.name}: input {what} {size} at dim {dim} (+ 2 x padding {pad_}) "
                                 f"is smaller than the kernel {what} {k}")
        return N, self.out_channels, (H + 2 * ph - R) // sh + 1, (W + 2 * pw - S) // sw + 1

    def _check(self, x):
        _check_image_input(self.name, x, self.in_channels)
        shape = self.output_shape(x.shape)
        if x.dtype != self.weight.dtype:
            raise TypeError(f"{self.name}: input dtype {x.dtype} differs from the weight's "
                            f"{self.weight.dtype}; convert the input (or the parameters, for a gradcheck)")
        return shape

    def forward(self, x):
        self._check(x)
        return Conv2dFunction.apply(x, self.weight, self.bias, stride=self.stride, padding=self.padding,
                                    arena=arena_for(self))

    def forward_with_next(self, x, following):
        """This layer and, when they come next, a ReLU and a max pooling, as one
        Function (one pass for bias, ReLU and pooling after the product; the
        gradient scattered, masked and summed for the bias in one pass back).

        Fuses a :class:`~minips.nn.ReLU` that follows, and then a
        :class:`MaxPool2d` whose stride equals its window (no overlap) and
        whose window fits the output; not with the reference twins on
        (``MINIPS_REFERENCE_KERNELS``). Returns ``(y, used)``: the output and
        how many of ``following`` it computed (0, 1 or 2).
        """
        if reference_kernels() or not following or type(following[0]) is not ReLU:
            return self(x), 0
        _, _, P, Q = self._check(x)
        pool, used = None, 1
        if len(following) > 1 and type(following[1]) is MaxPool2d:
            mp = following[1]
            (kh, kw) = mp.kernel_size
            if mp.stride == mp.kernel_size and kh <= P and kw <= Q:
                pool, used = mp.kernel_size, 2
        y = Conv2dFunction.apply(x, self.weight, self.bias, stride=self.stride, padding=self.padding,
                                 relu=True, pool=pool, arena=arena_for(self))
        return y, used

    def extra_repr(self):
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}, padding={self.padding}, bias={self.bias is not None}")


class _Pool2d(Module):
    kind = ""

    def __init__(self, kernel_size, stride=None):
        super().__init__()
        self.kernel_size = _pair(kernel_size, f"{type(self).__name__}: kernel_size", 1)
        self.stride = self.kernel_size if stride is None else _pair(stride, f"{type(self).__name__}: stride", 1)

    @property
    def name(self) -> str:
        k, s = self.kernel_size, self.stride
        ks = str(k[0]) if k[0] == k[1] else f"{k[0]}x{k[1]}"
        return f"{type(self).__name__}({ks}" + ("" if s == k else f", stride={s}") + ")"

    def _check(self, x):
        _check_image_input(self.name, x)
        for dim, k, what in ((2, self.kernel_size[0], "height"), (3, self.kernel_size[1], "width")):
            if x.shape[dim] < k:
                raise ValueError(f"{self.name}: input {what} {x.shape[dim]} at dim {dim} is smaller "
                                 f"than the window {what} {k}")

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride}"


class MaxPool2d(_Pool2d):
    """Max pooling over ``kernel_size`` windows, NCHW.

    Args:
        kernel_size: int or (kh, kw); stride: int or pair, default = kernel_size.

    Input (N, C, H, W) -> (N, C, (H - kh) // sh + 1, (W - kw) // sw + 1).

    Raises:
        ValueError: input not 4-D, or smaller than the window (naming the dimension).
    """

    def forward(self, x):
        self._check(x)
        return MaxPool2dFunction.apply(x, kernel=self.kernel_size, stride=self.stride, arena=arena_for(self))


class AvgPool2d(_Pool2d):
    """Average pooling over ``kernel_size`` windows, NCHW; as :class:`MaxPool2d`."""

    def forward(self, x):
        self._check(x)
        return AvgPool2dFunction.apply(x, kernel=self.kernel_size, stride=self.stride, arena=arena_for(self))
