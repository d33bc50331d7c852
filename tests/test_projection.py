"""The scaling projection (minips.labs.projection) against hand-computed cases."""
import math

import pytest

from minips.distributed.algorithms import resolve
from minips.distributed.costmodel import NetworkModel, NETWORKS, ring_allreduce_time
from minips.labs.projection import (StepProfile, allreduce_time, interference_from_overlap, project,
                                           rabenseifner_allreduce_time, step_time, weak_scaling_efficiency)


# Each algorithm's cost model lives next to its update rule (Algorithm.step_time);
# projection.step_time looks it up by spec string.
def step_time_sync(prof, P, net, interference=0.0):
    return step_time("sync", prof, P, net, interference)


def step_time_overlap_sync(prof, P, net, interference=0.0):
    return step_time("overlap-sync", prof, P, net, interference)


def step_time_pseudo_sync(prof, P, net, interference=0.0):
    return step_time("pseudo-sync", prof, P, net, interference)

NET = NetworkModel(1e-6, 1e-9, "hand")   # 1 us, 1 GB/s


def test_ring_and_rabenseifner_by_hand():
    # ring, P = 4, 1 MB: 2*3*1us + 2*3/4 * 1e6 B * 1 ns/B = 6 us + 1.5 ms
    assert ring_allreduce_time(1e6, 4, 1e-6, 1e-9) == pytest.approx(1.506e-3)
    assert allreduce_time(1e6, 4, NET) == pytest.approx(1.506e-3)
    # Rabenseifner, P = 8: 2*log2(8)*1us + 2*7/8 * 1e6 * 1e-9 = 6 us + 1.75 ms
    assert rabenseifner_allreduce_time(1e6, 8, 1e-6, 1e-9) == pytest.approx(1.756e-3)
    assert allreduce_time(1e6, 8, NET, "rabenseifner") == pytest.approx(1.756e-3)
    # ... and the ring at P = 8 pays 14 latencies instead of 6
    assert allreduce_time(1e6, 8, NET) == pytest.approx(14e-6 + 1.75e-3)
    assert allreduce_time(1e6, 1, NET) == 0.0 and rabenseifner_allreduce_time(1e6, 1, 1e-6, 1e-9) == 0.0
    with pytest.raises(ValueError, match="ring or rabenseifner"):
        allreduce_time(1e6, 4, NET, "tree")
    with pytest.raises(ValueError, match="P must be >= 1"):
        rabenseifner_allreduce_time(1e6, 0, 1e-6, 1e-9)


# extras (keywords): pseudo-sync's predictor seconds, overlap-sync's buckets
PROF = StepProfile(forward=0.02, backward=0.03, update=0.0, other=0.0, grad_bytes=1e6, predict=0.01,
                   buckets=(3e5, 7e5))


def test_sync_step_is_compute_plus_allreduce():
    # compute 50 ms (no predictor in sync) + 1.506 ms
    assert step_time_sync(PROF, 4, NET) == pytest.approx(0.05 + 1.506e-3)
    assert step_time_sync(PROF, 1, NET) == pytest.approx(0.05)


def test_overlap_sync_hides_all_but_the_last_bucket():
    a1 = 6e-6 + 1.5 * 3e5 * 1e-9   # 0.456 ms
    a2 = 6e-6 + 1.5 * 7e5 * 1e-9   # 1.056 ms
    assert step_time_overlap_sync(PROF, 4, NET) == pytest.approx(0.05 + a2)
    # phi = 1: the hidden first bucket costs its full time after all
    assert step_time_overlap_sync(PROF, 4, NET, interference=1.0) == pytest.approx(0.05 + a1 + a2)
    # one bucket: nothing to hide, same as sync
    one = StepProfile(0.02, 0.03, grad_bytes=1e6)
    assert step_time_overlap_sync(one, 4, NET) == pytest.approx(step_time_sync(one, 4, NET))
    # backward shorter than the first bucket: only backward's worth is hidden
    short = StepProfile(0.0, 1e-4, grad_bytes=1e6, buckets=(3e5, 7e5))
    assert step_time_overlap_sync(short, 4, NET) == pytest.approx(1e-4 + (a1 + a2 - 1e-4))


def test_pseudo_sync_is_max_of_compute_and_allreduce():
    # C = 50 ms compute + 10 ms predictor; A = 1.506 ms is hidden
    assert step_time_pseudo_sync(PROF, 4, NET) == pytest.approx(0.06)
    assert step_time_pseudo_sync(PROF, 4, NET, interference=1.0) == pytest.approx(0.06 + 1.506e-3)
    slow = NetworkModel(0.0, 1e-7 / 1.5, "slow")   # A = 2*3/4 * 1e6 * 1e-7/1.5 = 0.1 s at P = 4
    assert allreduce_time(1e6, 4, slow) == pytest.approx(0.1)
    assert step_time_pseudo_sync(PROF, 4, slow) == pytest.approx(0.1)
    # phi = 0.5: 60 ms compute + 0.5 * 60 ms + (100 - 60) ms exposed
    assert step_time_pseudo_sync(PROF, 4, slow, interference=0.5) == pytest.approx(0.13)
    with pytest.raises(ValueError, match="interference must be in"):
        step_time_pseudo_sync(PROF, 4, NET, interference=1.5)


def test_projection_efficiencies_by_hand():
    res = project({"sync": PROF, "pseudo-sync": PROF}, NET, [1, 4, 64], baseline="sync")
    assert res["sync"]["efficiency"][0] == 1.0 and res["pseudo-sync"]["efficiency"][0] == 1.0
    # sync at P = 4: 50 / 51.506 ms
    assert res["sync"]["efficiency"][1] == pytest.approx(0.05 / 0.051506)
    # P = 64: A = 2*63*1us + 2*63/64 * 1 ms = 0.126 ms + 1.96875 ms
    a64 = 126e-6 + 2 * 63 / 64 * 1e-3
    assert res["sync"]["comm_s"][2] == pytest.approx(a64)
    assert res["sync"]["efficiency"][2] == pytest.approx(0.05 / (0.05 + a64))
    assert res["pseudo-sync"]["efficiency"][2] == pytest.approx(1.0)
    # ... but its 10 ms predictor makes each step 60 ms against sync's 50 ms on one node
    assert res["pseudo-sync"]["vs_baseline_1"][2] == pytest.approx(0.05 / 0.06)
    assert res["sync"]["vs_baseline_1"][1] == pytest.approx(res["sync"]["efficiency"][1])
    # EDR preset: 100 Gb/s of data (4 x 25.78125 Gb/s, 64b/66b), 1 us
    edr = NETWORKS["ib-edr"]
    assert edr.bandwidth_gbps == pytest.approx(100.0)
    e = project({"sync": PROF}, "ib-edr", [128])["sync"]["efficiency"][0]
    a = 2 * 127 * 1e-6 + 2 * 127 / 128 * 1e6 * 8 / 100e9
    assert e == pytest.approx(0.05 / (0.05 + a))
    with pytest.raises(ValueError, match="no step-time model for 'gossip': unknown algorithm"):
        project({"gossip": PROF}, NET, [2])


def test_staleness_does_not_change_the_pseudo_sync_model_but_options_reach_it():
    """A spec's options reach the class's cost model: overlap-sync's bucket size
    is what the profile says, pseudo-sync's steady state is the same for any k."""
    assert step_time("pseudo-sync:staleness=3", PROF, 4, NET) == pytest.approx(step_time("pseudo-sync", PROF, 4, NET))
    assert step_time("pseudo-sync:adaptive:2@k2", PROF, 4, NET) == pytest.approx(0.06)
    with pytest.raises(ValueError, match="has no option 'period'"):
        step_time("sync:period=2", PROF, 4, NET)


def test_efficiency_and_interference_helpers():
    assert weak_scaling_efficiency(0.05, 0.0625) == pytest.approx(0.8)
    with pytest.raises(ValueError):
        weak_scaling_efficiency(0.0, 1.0)
    # C = 1 s, A = 0.5 s; overlapped: compute 1.2 s + wait 0.1 s = 1.3 s -> phi = 0.3 / 0.5
    assert interference_from_overlap(1.0, 1.2, 0.1, 0.5) == pytest.approx(0.6)
    assert interference_from_overlap(1.0, 1.0, 0.0, 0.5) == 0.0          # perfectly hidden
    assert interference_from_overlap(1.0, 1.0, 0.5, 0.5) == 1.0          # nothing progressed
    assert interference_from_overlap(1.0, 1.0, 0.9, 0.5) == 1.0          # worse than serial: clipped


def test_profile_checks_and_from_summary():
    with pytest.raises(ValueError, match="forward must be >= 0"):
        StepProfile(-1.0, 0.0)
    with pytest.raises(ValueError, match="buckets sum"):  # checked where overlap-sync's model reads them
        step_time("overlap-sync", StepProfile(0.0, 0.0, grad_bytes=10, buckets=(3, 3)), 2, NET)
    with pytest.raises(ValueError, match="no registered algorithm reads 'bukets'; the extras they read: buckets"):
        step_time("overlap-sync", StepProfile(0.0, 0.0, grad_bytes=10, bukets=(3, 7)), 2, NET)
    s = {"step_time_s": 0.1, "time_breakdown": {"forward": 0.03, "backward": 0.04, "post": 0.001, "wait": 0.005,
                                                "predict": 0.01, "update": 0.002}}
    spec = resolve("pseudo-sync")
    p = StepProfile.from_summary(s, 4000, extras=spec.cls.profile_extras(spec.options, (), s["time_breakdown"]))
    assert p.other == pytest.approx(0.1 - 0.088)
    assert p.compute == pytest.approx(0.03 + 0.04 + 0.002 + 0.012)
    assert math.isclose(p.extras["predict"], 0.01)


def test_overlap_sync_asks_its_own_buckets():
    """overlap-sync's profile extras are the buckets FlatParams cuts the model into at its bucket-mb."""
    import numpy as np

    from minips.distributed.flat import FlatParams
    from minips.nn.module import Parameter
    shapes = [(300, 500), (300,), (500, 200), (200,)]
    params = [Parameter(np.zeros(s, np.float32)) for s in shapes]
    for mb in (0.0, 0.3, 1.0):
        flat = FlatParams(params, bucket_mb=mb)
        spec = resolve(f"overlap-sync:bucket-mb={mb}")
        got = spec.cls.profile_extras(spec.options, shapes, {})["buckets"]
        assert got == tuple(4.0 * (b.stop - b.start) for b in flat.buckets)
        assert sum(got) == 4.0 * flat.numel


def test_local_update_methods_pay_one_weight_allreduce_per_average():
    """local-sgd: compute + A / H (2 A / H when the momentum buffers are averaged
    too); post-local-sgd: half the run synchronous by default, steady state after
    an explicit switch step; aperiodic-local-sgd: averages per step over the
    first 16 rounds of a growing schedule, or over an explicit list's span."""
    a4 = 6e-6 + 1.5e-3  # ring allreduce of 1 MB over 4 nodes at 1 us, 1 GB/s
    assert step_time("local-sgd:period=4", PROF, 4, NET) == pytest.approx(0.05 + a4 / 4)
    assert step_time("local-sgd:period=4:average-momentum=true", PROF, 4, NET) == pytest.approx(0.05 + a4 / 2)
    assert step_time("local-sgd:period=4", PROF, 1, NET) == pytest.approx(0.05)
    assert step_time("post-local-sgd:period=16", PROF, 4, NET) == pytest.approx(0.05 + a4 / 2 + a4 / 32)
    assert step_time("post-local-sgd:period=16:switch-step=100", PROF, 4, NET) == pytest.approx(0.05 + a4 / 16)
    assert step_time("aperiodic-local-sgd:schedule=10+20+40", PROF, 4, NET) == pytest.approx(0.05 + a4 * 3 / 40)
    # h0 = 2, gamma = 1: gaps 2, 4, ..., 32; 16 averages in 2 * (1 + ... + 16) = 272 steps
    assert step_time("aperiodic-local-sgd:h0=2:gamma=1", PROF, 4, NET) == pytest.approx(0.05 + a4 * 16 / 272)
    assert step_time("aperiodic-local-sgd:h0=4:gamma=0", PROF, 4, NET) == pytest.approx(
        step_time("local-sgd:period=4", PROF, 4, NET))


def test_gossip_step_time_by_hand():
    """d-psgd: a neighbour exchange costs degree (alpha + n beta) whatever P is
    (ring: degree 2, P = 2: 1); cta hides it behind forward + backward (50 ms
    here), atc blocks; gossip-pga pays (H - 1) exchanges and one allreduce per
    H steps; pd-sgd I2 exchanges per I1 + I2 steps; one-peer-exponential one
    message, blocking."""
    n = 2 * (1e-6 + 1e6 * 1e-9)                       # ring exchange of 1 MB: 2.002 ms
    assert step_time("d-psgd", PROF, 4, NET) == pytest.approx(0.05)
    assert step_time("d-psgd", PROF, 4, NET, interference=1.0) == pytest.approx(0.05 + n)
    assert step_time("d-psgd:form=atc", PROF, 4, NET) == pytest.approx(0.05 + n)
    assert step_time("d-psgd:form=atc", PROF, 1024, NET) == pytest.approx(0.05 + n)   # independent of P
    assert step_time("d-psgd:form=atc", PROF, 2, NET) == pytest.approx(0.05 + 1.001e-3)
    assert step_time("d-psgd:form=atc", PROF, 1, NET) == pytest.approx(0.05)
    assert step_time("d-psgd:form=atc:topology=torus", PROF, 16, NET) == pytest.approx(0.05 + 2 * n)  # 4 x 4: degree 4
    assert step_time("d-psgd:one-peer-exponential", PROF, 8, NET) == pytest.approx(0.05 + 1.001e-3)
    a4 = 6e-6 + 1.5e-3                                # sync's ring allreduce at P = 4
    assert step_time("sync", PROF, 4, NET) == pytest.approx(0.05 + a4)
    assert step_time("gossip-pga:period=6", PROF, 4, NET) == pytest.approx(0.05 + (5 * n + a4) / 6)
    assert step_time("gossip-aga:h0=4", PROF, 4, NET) == pytest.approx(0.05 + (3 * n + a4) / 4)
    assert step_time("pd-sgd:i1=3:i2=1", PROF, 4, NET) == pytest.approx(0.05 + n / 4)
    # a slow exchange: cta hides 50 ms of forward + backward, the rest shows
    slow = NetworkModel(0.0, 4e-8, "slow")            # ring exchange: 2 x 1e6 x 4e-8 = 80 ms
    assert step_time("d-psgd", PROF, 4, slow) == pytest.approx(0.05 + 0.03)


def test_gossip_overtakes_allreduce_on_1gbe():
    """1 GbE (alpha 50 us, beta 8 ns/B), 1 MB: a ring exchange costs
    2 (50 us + 8 ms) = 16.1 ms for P >= 3 (P = 2: one neighbour, 8.05 ms);
    the ring allreduce 1e-4 (P - 1) + 0.016 (P - 1)/P s. The allreduce is
    dearer when P^2 - 2P - 160 > 0, i.e. P > 1 + sqrt(161) = 13.7: from
    P = 14 on, up to 1024 (at P = 2 gossip wins too, by one alpha; P = 3..13
    it loses). atc form: both block, so compute cancels."""
    prof = StepProfile(forward=0.004, backward=0.006, grad_bytes=1e6)
    Ps = list(range(1, 1025))
    res = project({"sync": prof, "d-psgd:form=atc": prof}, "1gbe", Ps, baseline="sync")
    gossip, sync = res["d-psgd:form=atc"], res["sync"]
    assert gossip["step_s"][13] == pytest.approx(0.01 + 0.0161)           # P = 14
    assert sync["step_s"][13] == pytest.approx(0.01 + 13e-4 + 0.016 * 13 / 14)
    faster = [P for P, t, tb in zip(Ps, gossip["step_s"], sync["step_s"]) if t < tb]
    assert faster[:2] == [2, 14] and faster[1:] == list(range(14, 1025))
    assert gossip["overtakes_at"] == 14 and 2 < gossip["overtakes_at"] < math.inf
    assert sync["overtakes_at"] is None


def test_remaining_local_update_and_gossip_models_by_hand():
    """The families' other cost models, each at P = 4 on 1 us / 1 GB/s with a
    1 MB model and 50 ms of compute (PROF), written out from their rules:
    a4 = ring allreduce of 1 MB = 6 us + 1.5 ms; m = one message alpha + n beta."""
    a4, m = 6e-6 + 1.5e-3, 1e-6 + 1e6 * 1e-9
    C = 0.05
    # stl-sgd: one weight allreduce every k1 steps (the first stage's period)
    assert step_time("stl-sgd", PROF, 4, NET) == pytest.approx(C + a4 / 2)
    assert step_time("stl-sgd:k1=4", PROF, 4, NET) == pytest.approx(C + a4 / 4)
    # adaptive-batch: two d-float allreduces per round of H = 4 steps
    assert step_time("adaptive-batch", PROF, 4, NET) == pytest.approx(C + 2 * a4 / 4)
    # overlap-local-sgd: the weight allreduce (1.5 ms) hides behind H C = 200 ms
    assert step_time("overlap-local-sgd", PROF, 4, NET) == pytest.approx(C)
    assert step_time("overlap-local-sgd", PROF, 4, NET, interference=1.0) == pytest.approx(C + a4 / 4)
    assert step_time("overlap-local-sgd:consensus=blocking", PROF, 4, NET) == pytest.approx(
        C + (6e-6 + 1.5 * 8e-9) / 4)
    slow = NetworkModel(0.0, 4e-8, "slow")  # allreduce 1.5 x 1e6 x 4e-8 = 60 ms > H C = 50 ms with H = 1
    assert step_time("overlap-local-sgd:period=1", PROF, 4, slow) == pytest.approx(C + 0.01)
    # gossipgrad: one Sendrecv of the gradient per step
    assert step_time("gossipgrad", PROF, 4, NET) == pytest.approx(C + m)
    assert step_time("gossipgrad", PROF, 1, NET) == pytest.approx(C)
    # elastic-gossip: ring allgather of P ints (3 rounds of 1 us + 4 ns) + 2 p messages, every tau steps
    ag = 3 * (1e-6 + 4e-9)
    assert step_time("elastic-gossip", PROF, 4, NET) == pytest.approx(C + ag + 2 * m)
    assert step_time("elastic-gossip:period=4", PROF, 4, NET) == pytest.approx(C + (ag + 2 * m) / 4)
    # sgp: P = 4 is a power of two, so the one-peer exponential graph: one message of d floats + the weight
    assert step_time("sgp", PROF, 4, NET) == pytest.approx(C + 1e-6 + (1e6 + 4) * 1e-9)
    assert step_time("sgp", PROF, 6, NET) == pytest.approx(C + 1e-6 + (1e6 + 4) * 1e-9)   # directed ring
    # gradient tracking on the ring (degree 2): cta sends x and y together (2 MB), atc twice 1 MB
    assert step_time("gradient-tracking", PROF, 4, NET) == pytest.approx(C + 2 * (1e-6 + 2e-3))
    assert step_time("gradient-tracking:form=atc", PROF, 4, NET) == pytest.approx(C + 2 * 2 * m)
    # gt-pga: gossip on 5 of 6 steps, an allreduce of 2 MB (6 us + 3 ms) on the sixth
    assert step_time("gt-pga", PROF, 4, NET) == pytest.approx(C + 5 / 6 * 2 * (1e-6 + 2e-3) + (6e-6 + 3e-3) / 6)
    # dng: one ring exchange of y
    assert step_time("dng", PROF, 4, NET) == pytest.approx(C + 2 * m)
    # hetero-gossip: one message of d + 1 floats; rank 1 twice as slow paces every exchange
    # unless batches are balanced (then every rank's compute is P / sum s = 4 / 3.5 of the base)
    assert step_time("hetero-gossip", PROF, 4, NET) == pytest.approx(C + 1e-6 + (1e6 + 4) * 1e-9)
    assert step_time("hetero-gossip:slowdown=1*2", PROF, 4, NET) == pytest.approx(C * 4 / 3.5 + 1e-6 + (1e6 + 4) * 1e-9)
    assert step_time("hetero-gossip:slowdown=1*2:balance=false", PROF, 4, NET) == pytest.approx(
        2 * C + 1e-6 + (1e6 + 4) * 1e-9)


def test_every_registered_algorithm_has_a_hand_computed_cost_case():
    """A new algorithm must come with a hand-computed case of its cost model in
    this file: a ``step_time("NAME...`` call for every name in the registry."""
    import re
    from pathlib import Path

    from minips.distributed.algorithms import ALGORITHMS

    src = Path(__file__).read_text()
    covered = set(re.findall(r'step_time(?:_\w+)?\(\s*"([a-z0-9-]+)', src))
    covered |= {n.replace("_", "-") for n in re.findall(r"def step_time_(\w+)\(", src)}
    missing = [name for name in ALGORITHMS if name not in covered]
    assert missing == [], f"no hand-computed step_time case for {missing}"


def test_compression_models_by_hand():
    """The compression family's cost models at P = 4 on 1 us / 1 GB/s with a
    1 MB gradient (d = 250 000 floats) and 50 ms of compute (PROF), written out
    from their rules. Compression compute is d x (compress + decodes x
    decompress) at the compressors' measured CPU ns per entry
    (docs/bench/compression/compress-time.json), pinned first so that a new
    measurement shows up here. a(n) = ring allreduce = 6 us + 1.5 n ns;
    g(n) = ring allgatherv of four n-byte payloads = 3 (1 us + n ns);
    a ring neighbour exchange (degree 2) = 2 (1 us + n ns)."""
    from minips.distributed.algorithms.powersgd import FLOPS
    from minips.distributed.compression import COMPRESSORS

    rates = {name: (COMPRESSORS[name].compress_ns, COMPRESSORS[name].decompress_ns)
             for name in ("topk", "randomk", "qsgd-quant", "countsketch", "gaussian", "sign")}
    assert rates == {"topk": (10.5, 0.08), "randomk": (0.39, 0.46), "qsgd-quant": (28.0, 8.0),
                     "countsketch": (4.1, 58.0), "gaussian": (0.81, 0.51), "sign": (0.64, 0.4)}
    assert FLOPS == 1.8e10
    C, d, ns = 0.05, 250_000, 1e-9

    # topk-sgd, ratio 0.01: k = 2500, payload 2500 x (4 B value + 4 B index) = 20 000 B, not summable:
    # allgatherv, and 4 payloads decoded
    assert step_time("topk-sgd", PROF, 4, NET) == pytest.approx(C + d * (10.5 + 4 * 0.08) * ns + 3 * (1e-6 + 20_000e-9))
    # one rank: no network, but it still compresses and decodes its own payload
    assert step_time("topk-sgd", PROF, 1, NET) == pytest.approx(C + d * (10.5 + 0.08) * ns)
    # random-k (shared seed) is summable: one allreduce of 2500 floats = 10 000 B, one decode
    assert step_time("topk-sgd:compressor=randomk", PROF, 4, NET) == pytest.approx(
        C + d * (0.39 + 0.46) * ns + 6e-6 + 1.5 * 10_000e-9)

    # qsgd, s = 15 -> ceil(log2 31) = 5 bits: 4 B x ceil(250000 / 512) = 4 x 489 = 1956 B of norms
    # + 5 x 250000 / 8 = 156 250 B of codes = 158 206 B, allgathered; 4 decodes
    assert step_time("qsgd", PROF, 4, NET) == pytest.approx(C + d * (28 + 4 * 8) * ns + 3 * (1e-6 + 158_206e-9))
    # s = 1 -> 2 bits: 1956 + 62 500 = 64 456 B (the per-entry rates are s = 15's)
    assert step_time("qsgd:s=1", PROF, 4, NET) == pytest.approx(C + 0.015 + 3 * (1e-6 + 64_456e-9))

    # powersgd, r = 2, no layer shapes: one 500 x 500 matrix, p = q = 2 x 500 floats = 4000 B per
    # allreduce (6 us + 6 us each), 4 r d = 2e6 multiply-adds at 1.8e10 /s
    assert step_time("powersgd", PROF, 4, NET) == pytest.approx(C + 2e6 / 1.8e10 + 2 * 12e-6)
    # with the shapes: 1000 x 240 and a conv kernel 8 x (3 x 5 x 5) = 8 x 75 are compressed, the
    # bias (1000) and a 3 x 4 matrix (r (3 + 4) = 14 >= 12) ride along in the first allreduce:
    # p = 2 x 1000 + 2 x 8 + 1000 + 12 = 3028 floats = 12 112 B; q = 2 x 240 + 2 x 75 = 630 floats = 2520 B;
    # 4 r (240 000 + 600) = 1 924 800 multiply-adds
    shaped = StepProfile(0.02, 0.03, grad_bytes=4 * (240_000 + 1000 + 600 + 12),
                         shapes=((1000, 240), (1000,), (8, 3, 5, 5), (3, 4)))
    assert step_time("powersgd", shaped, 4, NET) == pytest.approx(
        C + 1_924_800 / 1.8e10 + (6e-6 + 1.5 * 12_112e-9) + (6e-6 + 1.5 * 2520e-9))

    # gs-sgd, ratio 0.01: k = 2500, sketch 5 rows x 4k = 10 000 columns = 200 000 B allreduced, then the
    # exact values of the k entries (10 000 B); sketch + query of all d (4.1 + 58 ns) and the top-k of
    # the d estimates (10.5 ns, top-k's compress)
    sketching = d * (4.1 + 58) * ns + d * 10.5 * ns
    assert step_time("gs-sgd", PROF, 4, NET) == pytest.approx(
        C + sketching + (6e-6 + 1.5 * 200_000e-9) + (6e-6 + 1.5 * 10_000e-9))
    assert step_time("gs-sgd:second-round=false", PROF, 4, NET) == pytest.approx(
        C + sketching + 6e-6 + 1.5 * 200_000e-9)

    # gaussian-avg, projection: m_b = ceil(0.05 x 256) = 13 floats per block of 256, ceil(250000/256) =
    # 977 blocks: 4 x 977 x 13 = 50 804 B in one allreduce (summable), one decode
    assert step_time("gaussian-avg", PROF, 4, NET) == pytest.approx(
        C + d * (0.81 + 0.51) * ns + 6e-6 + 1.5 * 50_804e-9)
    # kernel reading, H = 8: the mean (1 MB), the min of the distances (8 B), the weighted sum and
    # its normaliser (1 MB + 4 B), once per 8 steps
    assert step_time("gaussian-avg:kernel", PROF, 4, NET) == pytest.approx(
        C + ((6e-6 + 1.5e-3) + (6e-6 + 1.5 * 8e-9) + (6e-6 + 1.5 * 1_000_004e-9)) / 8)

    # pqasgd: period 2, QSGD s = 1 (64 456 B, allgathered), compress + 4 decodes, every other step
    assert step_time("pqasgd", PROF, 4, NET) == pytest.approx(
        C + (d * (28 + 4 * 8) * ns + 3 * (1e-6 + 64_456e-9)) / 2)

    # ssd-sgd, k = 2: the 1 MB allreduce (1.506 ms) hides behind one step's 50 ms; the default warm-up
    # (a tenth of the run) is synchronous: + 0.1 x 1.506 ms
    a4 = 6e-6 + 1.5e-3
    assert step_time("ssd-sgd", PROF, 4, NET) == pytest.approx(C + 0.1 * a4)
    assert step_time("ssd-sgd:warmup=0", PROF, 4, NET) == pytest.approx(C)
    assert step_time("ssd-sgd:warmup=0", PROF, 4, NET, interference=1.0) == pytest.approx(C + a4 / 2)
    assert step_time("ssd-sgd:period=1:warmup=0", PROF, 4, NET) == pytest.approx(C + a4)   # = sync
    slow = NetworkModel(0.0, 4e-8, "slow")  # allreduce 1.5 x 1e6 x 4e-8 = 60 ms: 10 ms of it show, every 2 steps
    assert step_time("ssd-sgd:warmup=0", PROF, 4, slow) == pytest.approx(C + 0.01 / 2)

    # qprsgd, K = 8, QSGD s = 4 (4 bits: 1956 + 125 000 = 126 956 B, allgathered), 4 decodes
    assert step_time("qprsgd", PROF, 4, NET) == pytest.approx(
        C + (d * (28 + 4 * 8) * ns + 3 * (1e-6 + 126_956e-9)) / 8)
    # gossip mode on the ring: s = 32 (7 bits: 1956 + 218 750 = 220 706 B) to 2 neighbours, 3 decodes
    assert step_time("qprsgd:mode=gossip", PROF, 4, NET) == pytest.approx(
        C + (d * (28 + 3 * 8) * ns + 2 * (1e-6 + 220_706e-9)) / 8)

    # choco-sgd: ring, scaled sign (4 B scale + 250000 / 8 = 31 250 B of signs = 31 254 B) to 2
    # neighbours every step, 3 decodes (own + 2); P = 2: one neighbour; P = 1: own decode only
    assert step_time("choco-sgd", PROF, 4, NET) == pytest.approx(C + d * (0.64 + 3 * 0.4) * ns + 2 * (1e-6 + 31_254e-9))
    assert step_time("choco-sgd", PROF, 2, NET) == pytest.approx(C + d * (0.64 + 2 * 0.4) * ns + 1e-6 + 31_254e-9)
    assert step_time("choco-sgd", PROF, 1, NET) == pytest.approx(C + d * (0.64 + 0.4) * ns)
    assert step_time("choco-sgd:compressor=topk:ratio=0.01", PROF, 4, NET) == pytest.approx(
        C + d * (10.5 + 3 * 0.08) * ns + 2 * (1e-6 + 20_000e-9))


def test_profile_shapes_must_match_the_gradient():
    with pytest.raises(ValueError, match="shapes hold 12 floats"):  # checked where powersgd's model reads them
        step_time("powersgd", StepProfile(0.0, 0.0, grad_bytes=100, shapes=((3, 4),)), 2, NET)
    s = {"step_time_s": 0.1, "time_breakdown": {"forward": 0.03, "backward": 0.04, "update": 0.0}}
    spec = resolve("powersgd")
    extras = spec.cls.profile_extras(spec.options, [[3, 4]], s["time_breakdown"])
    assert StepProfile.from_summary(s, 48, extras=extras).extras["shapes"] == ((3, 4),)
