"""Convolution and pooling work buffers (kernels/arena.py): in the steady state
a training step allocates no large NumPy buffer inside conv and pool, and the
per-layer, per-thread arenas stay correct when ranks run as threads.

Allocations are seen through tracemalloc, which NumPy tells of every array
data block it allocates: around each conv/pool Function's forward and backward
the peak of traced memory is compared with the memory traced before the call,
so a buffer allocated and freed inside the call counts too.
"""
import threading
import tracemalloc

import numpy as np
import pytest

from minips import nn
from minips.models.convnet import ConvNet
from minips.nn import conv as nnconv
from minips.optim import SGD
from minips.tensor import Tensor

LIMIT = 64 * 1024        # bytes: the "no NumPy buffer of 64 KiB or more"


def _net():
    """Every conv/pool path: conv + ReLU + max pooling fused (direct and im2col
    forward), conv + ReLU without pooling, a convolution alone, an overlapping
    max pooling and an average pooling (not fused)."""
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),       # 16x16 -> 8x8, direct
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),      # 8x8 -> 4x4, im2col
        nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(),                       # ReLU only
        nn.Conv2d(32, 32, 3, padding=1),                                  # alone
        nn.MaxPool2d(3, stride=1),                                        # overlapping: 4x4 -> 2x2
        nn.AvgPool2d(2), nn.Flatten(), nn.Linear(32, 10))


def _measure_conv_and_pool(monkeypatch, record):
    """Wrap forward and backward of the conv and pool Functions: ``record`` gets
    (name, bytes) with the largest increase of traced memory during each call."""
    def wrap(cls, method):
        inner = getattr(cls, method)

        def measured(self, *args, **kwargs):
            before = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            out = inner(self, *args, **kwargs)
            record.append((f"{cls.__name__}.{method}", tracemalloc.get_traced_memory()[1] - before))
            return out
        monkeypatch.setattr(cls, method, measured)
    for cls in (nnconv.Conv2dFunction, nnconv.MaxPool2dFunction, nnconv.AvgPool2dFunction):
        for method in ("forward", "backward"):
            wrap(cls, method)


def _train(model, x, labels, steps, on_step=None):
    opt = SGD(model.parameters(), lr=0.01, momentum=0.9)
    losses = []
    for i in range(steps):
        if on_step:
            on_step(i)
        opt.zero_grad()
        loss = nn.cross_entropy(model(Tensor(x)), labels)
        loss.backward()
        opt.step()
        losses.append(float(loss.data))
    return losses


@pytest.mark.parametrize("make", [_net, lambda: ConvNet(image_size=(16, 16), dropout=0.0)],
                         ids=["every-path", "convnet"])
def test_no_large_buffer_is_allocated_in_conv_and_pool_in_the_steady_state(monkeypatch, make):
    rng = np.random.default_rng(0)
    model = make()
    x = rng.standard_normal((32, 1, 16, 16)).astype(np.float32)
    labels = rng.integers(0, 10, 32)
    _train(model, x, labels, 3)                # first steps: the arenas fill
    record = []
    _measure_conv_and_pool(monkeypatch, record)
    tracemalloc.start()
    try:
        _train(model, x, labels, 10)
    finally:
        tracemalloc.stop()
    names = {name for name, _ in record}
    assert {"Conv2dFunction.forward", "Conv2dFunction.backward"} <= names
    if make is _net:
        assert {"MaxPool2dFunction.forward", "MaxPool2dFunction.backward",
                "AvgPool2dFunction.forward", "AvgPool2dFunction.backward"} <= names
    worst = max(record, key=lambda r: r[1])
    assert worst[1] < LIMIT, f"{worst[0]} allocated {worst[1]} bytes in a steady-state step"
    # the buffers the measured calls use are large: the test would see them
    assert x.nbytes * 16 >= LIMIT


def test_the_measurement_sees_an_allocating_kernel(monkeypatch):
    """Without the arena (the functional form allocates every time) the same
    measurement reports a large allocation: the test above can fail."""
    rng = np.random.default_rng(1)
    record = []
    _measure_conv_and_pool(monkeypatch, record)
    x = Tensor(rng.standard_normal((32, 16, 8, 8)).astype(np.float32))
    w = Tensor(rng.standard_normal((32, 16, 3, 3)).astype(np.float32), requires_grad=True)
    tracemalloc.start()
    try:
        nnconv.conv2d(x, w, padding=1).sum().backward()
    finally:
        tracemalloc.stop()
    assert max(b for _, b in record) >= LIMIT


def _seeded_convnet():
    model = ConvNet(image_size=(16, 16), dropout=0.0)
    rng = np.random.default_rng(5)
    for p in model.parameters():
        p.data[...] = (rng.standard_normal(p.shape) * 0.1).astype(np.float32)
    return model


def _five_steps():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((16, 1, 16, 16)).astype(np.float32)
    labels = rng.integers(0, 10, 16)
    model = _seeded_convnet()
    losses = _train(model, x, labels, 5)
    return losses, [p.data.copy() for p in model.parameters()]


def test_convnet_on_virtual_ranks_equals_one_thread():
    """Four ranks as threads, each training its own ConvNet (own arenas) on the
    same data: every rank's losses and weights equal, bit for bit, those of the
    same steps run alone with one Numba and BLAS thread (what a rank gets)."""
    from minips.distributed.comm import virtual
    from minips.kernels.threads import set_threads
    import numba
    before = numba.get_num_threads()
    set_threads(1)
    try:
        alone = _five_steps()
    finally:
        set_threads(before)
    got = virtual.run(4, _five_steps)
    for losses, weights in got:
        assert losses == alone[0]
        assert all(np.array_equal(a, b) for a, b in zip(weights, alone[1]))
    assert alone[0][-1] < alone[0][0]


def test_one_layer_used_by_two_threads_keeps_their_outputs_apart():
    """A layer's arena is per thread: two threads running the same layer at once
    get their own buffers; every output kept stays what it was computed as."""
    rng = np.random.default_rng(4)
    net = nn.Sequential(nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
    inputs = [rng.standard_normal((8, 8, 12, 12)).astype(np.float32) for _ in range(2)]
    expected = [net(Tensor(x)).data.copy() for x in inputs]
    kept = [[], []]
    start = threading.Barrier(2)

    def work(i):
        start.wait()
        for _ in range(30):
            kept[i].append(net(Tensor(inputs[i])))   # kept alive: its buffer must not be reused
    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(2):
        assert len(kept[i]) == 30
        assert all(np.array_equal(y.data, expected[i]) for y in kept[i])
    assert len(net[0].__dict__["_arenas"]) >= 2     # one arena per thread that used the layer


def test_arena_reuses_only_buffers_nobody_holds():
    from minips.kernels.arena import Arena
    a = Arena()
    b1 = a.take((256, 256), np.float32)
    b2 = a.take((256, 256), np.float32)
    assert b1 is not b2 and a.allocations == 2            # b1 is held: a second one
    del b1
    b3 = a.take((256, 256), np.float32)
    assert a.allocations == 2 and not np.shares_memory(b3, b2)   # b1's memory, reused
    view = b3.T
    del b3
    assert not np.shares_memory(a.take((256, 256), np.float32), view)   # a view holds it too


