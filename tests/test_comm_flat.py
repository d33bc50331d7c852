"""Flat buffers, the one-rank communicator, the cost model."""
import numpy as np
import pytest

import minips as mp
from minips.distributed.comm import Comm
from minips.distributed.costmodel import NETWORKS, parse_network, ring_allreduce_time
from minips.distributed.flat import FlatParams
from minips.models import MLP


def model():
    mp.random.seed(0)
    return MLP(12, (8,), 3)


def test_flat_layout_is_backward_order_and_views():
    m = model()
    before = [p.data.copy() for p in m.parameters()]
    flat = FlatParams(m.parameters(), num_grad_buffers=2, bucket_mb=0.0001)  # ~26 floats per bucket
    params = m.parameters()
    assert flat.offsets[-1] == 0  # last layer's bias first
    assert flat.numel == sum(p.size for p in params)
    for p, b in zip(params, before):
        np.testing.assert_array_equal(p.data, b)  # values kept
        assert np.shares_memory(p.data, flat.weights) and np.shares_memory(p.grad, flat.grads[0])
    flat.weights[0] = 42.0
    assert params[-1].data[0] == 42.0
    # buckets: contiguous, parameter-aligned, covering everything, in backward order
    assert flat.buckets[0].start == 0 and flat.buckets[-1].stop == flat.numel
    assert all(a.stop == b.start for a, b in zip(flat.buckets, flat.buckets[1:]))
    assert flat.buckets[0].param_ids[0] == len(params) - 1
    flat.use_grad_buffer(1)
    assert np.shares_memory(params[0].grad, flat.grads[1])


def test_checksum_detects_one_bit():
    flat = FlatParams(model().parameters())
    h = flat.checksum()
    flat.weights.view(np.uint32)[5] ^= 1
    assert flat.checksum() != h


def test_flat_rejects_float64():
    m = model()
    m.parameters()[0].data = m.parameters()[0].data.astype(np.float64)
    with pytest.raises(TypeError, match="float32"):
        FlatParams(m.parameters())


def test_in_flight_buffer_is_read_only_until_complete():
    c = Comm(progress="none")  # one rank, no MPI
    flat = FlatParams(model().parameters())
    views = flat.grad_views(0)
    req = c.iallreduce(flat.grads[0], lock=views)
    assert c.pending() == 1
    with pytest.raises(ValueError, match="read-only"):
        views[0][...] = 1.0  # a parameter gradient in flight
    with pytest.raises(ValueError, match="read-only"):
        flat.grads[0][0] = 1.0
    with pytest.raises(RuntimeError, match="still in flight"):
        c.allreduce(flat.grads[0])
    req.wait()
    assert c.pending() == 0
    views[0][...] = 1.0  # writable again
    flat.grads[0][0] = 2.0


def test_comm_checks_buffers():
    c = Comm(progress="none")
    with pytest.raises(TypeError, match="contiguous float32"):
        c.allreduce(np.ones(3))
    with pytest.raises(TypeError, match="contiguous float32"):
        c.allreduce(np.ones((3, 2), np.float32)[:, 0])
    with pytest.raises(ValueError, match="unknown progress mode 'fast'"):
        Comm(progress="fast")
    assert "1 rank(s)" in c.describe() and "real network" in c.describe()


def test_ring_allreduce_hand_computed():
    # P=4, n=1e6 bytes, alpha=1us, beta=1ns/B: 2*3*1e-6 + 2*(3/4)*1e6*1e-9 = 6e-6 + 1.5e-3
    assert ring_allreduce_time(1e6, 4, 1e-6, 1e-9) == pytest.approx(1.506e-3)
    assert ring_allreduce_time(1e6, 1, 1e-6, 1e-9) == 0.0
    # P=2, 4 MB on 1 GbE (50 us, 8 ns/B): 2*50e-6 + 4e6*8e-9 = 0.0321 s
    assert NETWORKS["1gbe"].allreduce_time(4e6, 2) == pytest.approx(0.0321)
    with pytest.raises(ValueError, match="P must be >= 1"):
        ring_allreduce_time(1, 0, 0, 0)


def test_parse_network():
    assert parse_network("IB-EDR").name.startswith("InfiniBand EDR")
    assert parse_network("ib-edr").bandwidth_gbps == pytest.approx(100.0, rel=0.01)
    m = parse_network("alpha=2e-6,beta=1e-10")
    assert (m.alpha, m.beta) == (2e-6, 1e-10)
    with pytest.raises(ValueError, match="unknown network 'wifi'.*1gbe.*alpha=SECONDS"):
        parse_network("wifi")
    with pytest.raises(ValueError, match=">= 0"):
        parse_network("alpha=-1,beta=0")
