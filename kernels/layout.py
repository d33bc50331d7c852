"""Channels-last activations: the memory layout of every CNN kernel.

A CNN activation is, to the user, an array of shape (N, C, H, W), as in
PyTorch. Its *memory* can be ordered two ways:

- NCHW (C-contiguous): each channel's H x W plane is contiguous;
- NHWC, "channels-last": the C values of one pixel are contiguous. NumPy
  shows this as the same (N, C, H, W) shape with other strides: it is
  ``a.transpose(0, 3, 1, 2)`` of a C-contiguous (N, H, W, C) array, exactly
  what PyTorch calls ``torch.channels_last``.

The kernels work in NHWC: a 3x3 patch is then 9 contiguous runs of C values,
a matrix product writes its (pixels x channels) result directly as the next
layer's input, and pooling and the bias add run along contiguous channels.
Convolution and pooling *return* channels-last arrays and accept either
layout (an NCHW input is copied to NHWC once, at the edge: the first layer's
images, which for one channel are already both). Shapes, indexing, the
weights (K, C, R, S) and everything a user sees stay NCHW; ``Flatten``
reshapes in (C, H, W) order as before (NumPy copies there, the one layout
change of a forward pass).
"""
from __future__ import annotations

import numpy as np

__all__ = ["nhwc_view", "to_nhwc", "as_nchw", "is_channels_last"]


def nhwc_view(x: np.ndarray):
    """The (N, H, W, C) view of a logical (N, C, H, W) array if that view is
    C-contiguous (x is channels-last, or has one channel), else None."""
    v = x.transpose(0, 2, 3, 1)
    return v if v.flags.c_contiguous else None


def is_channels_last(x: np.ndarray) -> bool:
    """True when the (N, C, H, W) array ``x`` is stored NHWC (see the module docstring)."""
    return nhwc_view(x) is not None


def to_nhwc(x: np.ndarray, arena) -> np.ndarray:
    """A C-contiguous (N, H, W, C) array with the values of the logical
    (N, C, H, W) array ``x``: a view when x is already channels-last, else a
    copy into a buffer of ``arena`` (see :mod:`minips.kernels.arena`)."""
    v = x.transpose(0, 2, 3, 1)
    if v.flags.c_contiguous:
        return v
    out = arena.take(v.shape, x.dtype)
    np.copyto(out, v)
    return out


def as_nchw(y: np.ndarray) -> np.ndarray:
    """The logical (N, C, H, W) view of an (N, H, W, C) array (no copy)."""
    return y.transpose(0, 3, 1, 2)
