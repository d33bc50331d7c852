"""The cases of the kernels benchmark: one provider per kernel family (convolution, pooling,
elementwise, loss; the LSTM's is in :mod:`minips.bench.lstm`), listed in :data:`KERNEL_CASES`."""
from __future__ import annotations

import numpy as np

from ..cases import BenchContext, Case
from ..lstm import lstm_cases

__all__ = ["conv_shapes", "conv_cases", "pool_cases", "elementwise_cases", "loss_cases", "KERNEL_CASES",
           "collect_cases"]


def conv_shapes(batches):
    """(N, C, K, H) of the ConvNet's two convolutions, and 3->64 on 32x32."""
    for n in batches:
        yield n, 1, 32, 28
        yield n, 32, 64, 14
        yield n, 3, 64, 32


def conv_cases(ctx: BenchContext):
    from ...kernels import conv
    from ...kernels import reference as ref
    from ...kernels.arena import Arena
    torch = ctx.torch
    for N, C, K, H in conv_shapes(ctx.batches):
        x, w, b = ctx.randn(N, C, H, H), ctx.randn(K, C, 3, 3), ctx.randn(K)
        gy = ctx.randn(N, K, H, H)
        # The ConvNet needs no gradient for its input images: the first layer
        # skips dL/dx, as PyTorch does when the input does not require grad.
        need_x = C > 3
        flops1 = conv.geometry(x.shape, w.shape, 1, 1).flops_forward
        shape = f"N{N} {C}->{K} {H}x{H} k3"

        # minips gets what its layers pass: channels-last activations and
        # gradients (kernels/layout.py), work buffers from the layer's arena
        # (kernels/arena.py); PyTorch below gets its default, NCHW tensors.
        xl, gyl = (np.ascontiguousarray(a.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2) for a in (x, gy))
        arena = Arena()

        def numba_fwd(x=xl, w=w, b=b, arena=arena):
            return conv.conv2d_forward(x, w, b, 1, 1, arena=arena)

        def numba_fwd_bwd(x=xl, w=w, b=b, gy=gyl, need_x=need_x, arena=arena):
            _, saved = conv.conv2d_forward(x, w, b, 1, 1, arena=arena)
            return conv.conv2d_backward(gy, w, saved, need_x=need_x, arena=arena)

        def numpy_fwd(x=x, w=w, b=b):
            return ref.conv2d_forward(x, w, b, 1, 1)

        def numpy_fwd_bwd(x=x, w=w, b=b, gy=gy, need_x=need_x):
            ref.conv2d_forward(x, w, b, 1, 1)
            ref.conv2d_backward_weight(gy, x, w.shape, 1, 1)
            if need_x:
                ref.conv2d_backward_data(gy, w, x.shape, 1, 1)

        t_fwd = t_fwd_bwd = None
        if torch is not None:
            F = torch.nn.functional
            xt, wt, bt, gyt = (torch.from_numpy(a) for a in (x, w, b, gy))
            xg = xt.clone().requires_grad_(need_x)
            wg, bg = wt.clone().requires_grad_(), bt.clone().requires_grad_()

            def t_fwd(xt=xt, wt=wt, bt=bt, F=F):
                with torch.no_grad():
                    return F.conv2d(xt, wt, bt, padding=1)

            def t_fwd_bwd(xg=xg, wg=wg, bg=bg, gyt=gyt, F=F):
                F.conv2d(xg, wg, bg, padding=1).backward(gyt)
                xg.grad = wg.grad = bg.grad = None
        yield Case("conv2d fwd", shape, numba_fwd, numpy_fwd, t_fwd, flops=flops1)
        yield Case("conv2d fwd+bwd", shape, numba_fwd_bwd, numpy_fwd_bwd, t_fwd_bwd,
                   flops=flops1 * (3 if need_x else 2))


def _activation_shapes(batches):
    for n in batches:
        yield n, 32, 28
        yield n, 64, 14


def pool_cases(ctx: BenchContext):
    from ...kernels import pool
    from ...kernels import reference as ref
    from ...kernels.arena import Arena
    torch = ctx.torch
    for N, C, H in _activation_shapes(ctx.batches):
        x = ctx.randn(N, C, H, H)
        y, argmax = pool.maxpool2d_forward(x, 2, 2)
        gy = ctx.randn(*y.shape)
        shape = f"N{N} C{C} {H}x{H} k2"
        # least traffic: read x, write y and argmax (int32) / read gy, argmax, write gx
        fwd_bytes = x.nbytes + y.nbytes + argmax.nbytes
        bwd_bytes = gy.nbytes + argmax.nbytes + x.nbytes
        t_fwd = t_fwd_bwd = None
        if torch is not None:
            F = torch.nn.functional
            xt, gyt = torch.from_numpy(x), torch.from_numpy(gy)
            xg = xt.clone().requires_grad_()

            def t_fwd(xt=xt, F=F):
                with torch.no_grad():
                    return F.max_pool2d(xt, 2)

            def t_fwd_bwd(xg=xg, gyt=gyt, F=F):
                F.max_pool2d(xg, 2).backward(gyt)
                xg.grad = None
        # minips gets channels-last inputs and an arena, as its layers do (see conv_cases)
        xl, gyl = (np.ascontiguousarray(a.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2) for a in (x, gy))
        arena = Arena()
        yield Case("maxpool2d fwd", shape, lambda x=xl, arena=arena: pool.maxpool2d_forward(x, 2, 2, arena=arena),
                   lambda x=x: ref.maxpool2d_forward(x, 2, 2), t_fwd, bytes=fwd_bytes)

        def numba_mp(x=xl, gy=gyl, arena=arena):
            _, am = pool.maxpool2d_forward(x, 2, 2, arena=arena)
            return pool.maxpool2d_backward(gy, am, x.shape, arena=arena)

        def numpy_mp(x=x, gy=gy):
            _, am = ref.maxpool2d_forward(x, 2, 2)
            return ref.maxpool2d_backward(gy, am, x.shape)
        yield Case("maxpool2d fwd+bwd", shape, numba_mp, numpy_mp, t_fwd_bwd, bytes=fwd_bytes + bwd_bytes)
        t_avg = None
        if torch is not None:
            def t_avg(xt=xt, F=F):
                with torch.no_grad():
                    return F.avg_pool2d(xt, 2)
        yield Case("avgpool2d fwd", shape, lambda x=xl, arena=arena: pool.avgpool2d_forward(x, 2, 2, arena=arena),
                   lambda x=x: ref.avgpool2d_forward(x, 2, 2), t_avg, bytes=x.nbytes + y.nbytes)


def elementwise_cases(ctx: BenchContext):
    from ...kernels import elementwise as ew
    from ...kernels import reference as ref
    torch = ctx.torch
    for N, C, H in _activation_shapes(ctx.batches):
        x = ctx.randn(N, C, H, H)
        gy = ctx.randn(N, C, H, H)
        y = ew.relu_forward(x)
        shape = f"N{N} C{C} {H}x{H}"
        t_fwd = t_bwd = None
        if torch is not None:
            xt, gyt, yt = (torch.from_numpy(a) for a in (x, gy, y))

            def t_fwd(xt=xt):
                return torch.relu(xt)

            def t_bwd(yt=yt, gyt=gyt):
                # what autograd's ReLU backward computes
                return torch.ops.aten.threshold_backward(gyt, yt, 0)
        yield Case("relu fwd", shape, lambda x=x: ew.relu_forward(x), lambda x=x: ref.relu_forward(x),
                   t_fwd, bytes=2 * x.nbytes)
        yield Case("relu bwd", shape, lambda y=y, gy=gy: ew.relu_backward(y, gy),
                   lambda y=y, gy=gy: ref.relu_backward(y, gy), t_bwd, bytes=3 * x.nbytes)


def loss_cases(ctx: BenchContext):
    from ...kernels import loss
    from ...kernels import reference as ref
    torch = ctx.torch
    for N in ctx.batches:
        z = ctx.randn(N, 10)
        y = ctx.rng.integers(0, 10, N)

        def numba_fb(z=z, y=y):
            _, p = loss.softmax_xent_forward(z, y)
            return loss.softmax_xent_backward(p, y, 1.0)

        def numpy_fb(z=z, y=y):
            _, p = ref.softmax_xent_forward(z, y)
            return ref.softmax_xent_backward(p, y, 1.0)
        t_fb = None
        if torch is not None:
            zg, yt = torch.from_numpy(z).requires_grad_(), torch.from_numpy(y)

            def t_fb(zg=zg, yt=yt):
                torch.nn.functional.cross_entropy(zg, yt).backward()
                zg.grad = None
        yield Case("softmax-xent fwd+bwd", f"N{N} C10", numba_fb, numpy_fb, t_fb)


#: The table of case providers, called in order: ``provider(ctx) -> iterable of Case``
#: (a new kernel's cases: a provider function and one entry here).
KERNEL_CASES: list = [conv_cases, pool_cases, elementwise_cases, loss_cases, lstm_cases]


def collect_cases(ctx: BenchContext, only: str | None = None) -> list:
    """Every provider's cases (:data:`KERNEL_CASES`), optionally only those
    whose kernel or shape contains ``only``."""
    cases = [c for provider in KERNEL_CASES for c in provider(ctx)]
    if only:
        cases = [c for c in cases if only in c.kernel or only in c.shape]
    return cases
