"""The compression building blocks (minips.distributed.compression): kernels
against their NumPy twins, unbiasedness by Monte Carlo, the error-feedback
invariant, count-sketch heavy hitters, packing, bad options, and the
communicator on 3 ranks (payload sizes 0, 24, 48 bytes through the
allgather). Expected values are computed here with plain NumPy."""
import json

import numpy as np
import pytest

from minips.distributed.compression import (COMPRESSORS, ErrorFeedback, NoMemory, exchange, make_compressor)
from minips.kernels import compress as K
from minips.kernels import reference as R

from .conftest import ROOT, run_ranks
from .compression_worker import D, k_of, vec



def test_kernels_equal_their_numpy_twins(rng):
    v = rng.standard_normal(1000).astype(np.float32)
    v[100:612] = 0  # a zero bucket
    u = rng.random(1000)
    for s, bucket in ((1, 512), (15, 64), (127, 7)):
        n1, c1 = K.qsgd_quantize(v, s, bucket, u)
        n2, c2 = R.qsgd_quantize(v, s, bucket, u)
        np.testing.assert_allclose(n1, n2, rtol=1e-7)
        assert np.array_equal(c1, c2) and np.abs(c1).max() <= s
        np.testing.assert_allclose(K.qsgd_dequantize(n1, c1, s, bucket), R.qsgd_dequantize(n2, c2, s, bucket),
                                   rtol=1e-6)
    buckets = rng.integers(0, 37, size=(4, 1000), dtype=np.int32)
    signs = (2 * rng.integers(0, 2, size=(4, 1000)) - 1).astype(np.float32)
    t1, t2 = K.countsketch_accumulate(v, buckets, signs, 37), R.countsketch_accumulate(v, buckets, signs, 37)
    np.testing.assert_allclose(t1, t2, rtol=1e-5, atol=1e-5)
    for rows in (3, 4):  # odd and even rows (median = mean of the middle two)
        np.testing.assert_allclose(K.countsketch_query(t1[:rows], buckets[:rows], signs[:rows]),
                                   R.countsketch_query(t1[:rows], buckets[:rows], signs[:rows]), rtol=1e-6)


@pytest.mark.parametrize("name", list(COMPRESSORS))
def test_pack_unpack_and_bytes(name, rng):
    c = make_compressor(name)
    v = rng.standard_normal(777).astype(np.float32)
    p = c.compress(v, 4)
    raw = c.pack(p)
    assert raw.dtype == np.uint8 and raw.size == c.nbytes(p) == sum(a.nbytes for a in p.arrays)
    assert c.payload_bytes(777) == raw.size
    assert np.array_equal(c.decompress(c.unpack(raw, 777, 4)), c.decompress(p))
    assert c.decompress(p).dtype == np.float32 and c.decompress(p).shape == (777,)


def test_exact_cases(rng):
    v = rng.standard_normal(300).astype(np.float32)
    assert np.array_equal(make_compressor("identity").decompress(make_compressor("identity").compress(v)), v)
    full = make_compressor("topk", k=300)
    assert np.array_equal(full.decompress(full.compress(v)), v)
    top = make_compressor("topk", k=5)
    want = np.zeros(300, np.float32)
    keep = np.argsort(-np.abs(v))[:5]
    want[keep] = v[keep]
    assert np.array_equal(top.decompress(top.compress(v)), want)
    sign = make_compressor("sign")
    np.testing.assert_allclose(sign.decompress(sign.compress(v)), np.where(v >= 0, 1, -1) * np.abs(v).mean(),
                               rtol=1e-6)
    big = np.array([1e6, -1e6, 1.5], np.float32)
    assert np.array_equal(make_compressor("fp16").decompress(make_compressor("fp16").compress(big)),
                          np.array([65504, -65504, 1.5], np.float32))
    q = make_compressor("qsgd-quant", s=4, bucket=8)
    x = q.decompress(q.compress(v))  # every value is norm_of_bucket * l / s with |l| <= s
    norms = np.repeat(np.linalg.norm(np.pad(v, (0, 4)).astype(np.float64).reshape(-1, 8), axis=1), 8)[:300]
    levels = x / norms * 4
    np.testing.assert_allclose(levels, np.round(levels), atol=1e-4)
    assert np.all(np.abs(levels) <= 4 + 1e-4) and np.all(np.sign(levels) * np.sign(v) >= 0)


def _mc_mean(c, v, n):
    acc = np.zeros(v.size, np.float64)
    for t in range(n):
        acc += c.decompress(c.compress(v, t))
    return acc / n


def test_qsgd_and_randomk_are_unbiased_and_topk_is_not(rng):
    """N draws: |mean - v_j| <= 5 sigma_j / sqrt(N) per entry, sigma_j the
    compressor's own standard deviation for that entry, computed here:
    QSGD: (n/s) sqrt(p (1-p)), p = frac(s |v_j| / n); random-k (scaled):
    |v_j| sqrt(d/k - 1). A 5-sigma bound fails by chance with p ~ 6e-7 per entry."""
    N, d = 4000, 40
    v = rng.standard_normal(d).astype(np.float32)
    s = 3
    q = make_compressor("qsgd-quant", s=s, bucket=d)
    n = np.linalg.norm(v.astype(np.float64))
    r = s * np.abs(v) / n
    p = r - np.floor(r)
    sigma = n / s * np.sqrt(p * (1 - p))
    assert np.all(np.abs(_mc_mean(q, v, N) - v) <= 5 * sigma / np.sqrt(N) + 1e-6)
    rk = make_compressor("randomk", k=10, seed=3)
    sigma = np.abs(v) * np.sqrt(d / 10 - 1)
    assert np.all(np.abs(_mc_mean(rk, v, N) - v) <= 5 * sigma / np.sqrt(N) + 1e-6)
    g = make_compressor("gaussian", ratio=0.5, block=8)  # unbiased too: a looser check of the mean error
    assert np.abs(_mc_mean(g, v, N) - v).max() < 0.15 * np.abs(v).max()
    top = make_compressor("topk", k=10)  # the check can fail: top-k is biased
    assert not np.all(np.abs(_mc_mean(top, v, 10) - v) <= 5 * sigma / np.sqrt(N) + 1e-6)
    ur = make_compressor("randomk", k=10, scale=False)  # unscaled rand-k: E = (k/d) v
    np.testing.assert_allclose(_mc_mean(ur, v, N), v * 10 / d, atol=5 * np.abs(v).max() * 0.5 / np.sqrt(N) * 2)


@pytest.mark.parametrize("spec", ["topk:k=3", "randomk:k=4:scale=false", "sign", "qsgd-quant:s=2", "fp16"])
def test_error_feedback_loses_nothing(spec, rng):
    """sum_t decompress(c_t) + m_T == sum_t g_t (float64 sums; float32 rounding of each step)."""
    c = make_compressor(spec)
    ef = ErrorFeedback(60)
    applied, inputs = np.zeros(60), np.zeros(60)
    for t in range(50):
        g = rng.standard_normal(60).astype(np.float32)
        inputs += g
        applied += c.decompress(ef.compress(c, g, t))
    np.testing.assert_allclose(applied + ef.m, inputs, rtol=0, atol=1e-4 * np.abs(inputs).max())
    assert np.abs(ef.m).max() > 0  # something was held back (a sketch decoded whole is no contraction: not here)
    state = ef.state_dict()
    other = ErrorFeedback(60)
    other.load_state_dict(state)
    assert np.array_equal(other.m, ef.m)
    with pytest.raises(ValueError, match="same model"):
        ErrorFeedback(61).load_state_dict(state)
    plain = NoMemory(60)  # without memory the loss shows
    g = np.ones(60, np.float32)
    assert np.array_equal(c.decompress(plain.compress(c, g, 0)), c.decompress(c.compress(g, 0)))


def test_countsketch_recovers_planted_heavy_hitters(rng):
    d = 20000
    v = (0.01 * rng.standard_normal(d)).astype(np.float32)
    planted = rng.choice(d, 10, replace=False)
    v[planted] = rng.choice([-1, 1], 10) * (5 + rng.random(10))
    cs = make_compressor("countsketch", rows=7, cols=1000)  # a false hit needs 4 of 7 rows on a planted one
    est = cs.decompress(cs.compress(v))
    assert set(np.argsort(-np.abs(est))[:10]) == set(planted)
    np.testing.assert_allclose(est[planted], v[planted], atol=0.1)
    np.testing.assert_allclose(cs.estimate(cs.compress(v), planted), est[planted])
    # sketches are linear: the sketch of a sum is the sum of the sketches
    w = rng.standard_normal(d).astype(np.float32)
    np.testing.assert_allclose(cs.compress(v + w).arrays[0], cs.compress(v).arrays[0] + cs.compress(w).arrays[0],
                               rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("spec,kw,message", [
    ("topk:k=0", {}, "topk: k must be >= 1"),
    ("topk:ratio=0", {}, "topk: ratio must be in (0, 1]"),
    ("randomk:ratio=1.5", {}, "randomk: ratio must be in (0, 1]"),
    ("qsgd-quant:s=0", {}, "qsgd-quant: s must be an integer in 1..32767"),
    ("qsgd-quant:bucket=0", {}, "bucket must be an integer >= 1"),
    ("countsketch:cols=1", {}, "makes the sketch too small"),
    ("countsketch:rows=0", {}, "rows must be an integer >= 1"),
    ("topk:k=0.5", {}, "option k must be an integer, got 0.5; for a fraction use ratio="),
    ("topk:kk=3", {}, "compressor topk has no option 'kk'; its options: k, ratio"),
    ("zip", {}, "unknown compressor 'zip'; choose one of identity, fp16, topk"),
    ("topk:3", {}, "write NAME:key=value"),
])
def test_bad_options_say_what_to_write(spec, kw, message):
    with pytest.raises(ValueError) as e:
        make_compressor(spec, **kw)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_k_larger_than_d_says_so():
    with pytest.raises(ValueError, match=r"topk: k=20 exceeds the vector's size d=10; choose k <= 10"):
        make_compressor("topk", k=20).compress(np.ones(10, np.float32))
    with pytest.raises(TypeError, match="1-D float32"):
        make_compressor("topk", k=2).compress(np.ones(10))


def test_one_rank_exchange_is_the_decompressed_payload(rng):
    from minips.distributed.comm import Comm
    comm = Comm()
    v = rng.standard_normal(100).astype(np.float32)
    for spec in ("identity", "topk:k=7", "qsgd-quant", "randomk:k=9"):
        c = make_compressor(spec)
        p = c.compress(v, 2)
        assert np.array_equal(exchange(comm, c, p), c.decompress(p)), spec
    assert comm.bytes_sent == 0


def _topk_dense(j):
    x, out = vec(j), np.zeros(D)
    keep = np.argsort(-np.abs(x))[:k_of(j)]
    out[keep] = x[keep]
    return out


def test_exchange_on_three_ranks_with_a_different_size_on_each(tmp_path):
    """Payloads of 0, 24 and 48 bytes (top-k with k = 0, 3, 6) go through the
    allgather and every rank gets the mean; summable payloads go through the
    allreduce; the ring's neighbour exchange pads variable sizes. Bytes
    counted = payload bytes."""
    P = 3
    proc = run_ranks(P, ROOT / "tests" / "compression_worker.py", str(tmp_path), timeout=90)  # virtual ranks
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(P)]
    want = sum(_topk_dense(j) for j in range(P)) / P
    sizes = [8 * k_of(j) for j in range(P)]
    mean = np.mean([vec(j).astype(np.float64) for j in range(P)], axis=0)
    for r, o in enumerate(res):
        np.testing.assert_allclose(o["topk_mean"], want, rtol=1e-6, atol=1e-7)
        assert o["topk_nbytes"] == o["topk_counted"] == sizes[r]
        assert o["topk_sent"] == sum(sizes) - sizes[(r + 1) % P]  # ring: all but the successor's block
        np.testing.assert_allclose(o["identity"], mean, rtol=1e-6, atol=1e-7)
        assert o["identity nbytes"] == o["identity counted"] == 4 * D
        rk = np.asarray(o["randomk:ratio=0.2:seed=1"])
        support = np.flatnonzero(rk)
        assert support.size == 10 and o["randomk:ratio=0.2:seed=1 counted"] == 40
        np.testing.assert_allclose(rk[support], mean[support] * D / 10, rtol=1e-5)
        assert o["countsketch:rows=3:cols=20 counted"] == o["countsketch:rows=3:cols=20 nbytes"] == 240
        assert o["nbrs"] == sorted({(r - 1) % P, (r + 1) % P})
        for k, j in enumerate(o["nbrs"]):
            np.testing.assert_allclose(o["gossip_identity"][k], vec(j), rtol=0)
            np.testing.assert_allclose(o["gossip_topk"][k], _topk_dense(j), rtol=0)
        assert o["gossip_identity sent"] == 2 * 4 * D
        assert o["gossip_topk sent"] == 2 * (8 + max(sizes))  # padded to the largest, 8-byte length header
    assert np.abs(np.asarray(res[0]["randomk:ratio=0.2:seed=1"]) - res[1]["randomk:ratio=0.2:seed=1"]).max() == 0


def test_lowrank_rounds_give_the_rank_r_approximation_and_keep_the_warm_start():
    """One rank (the means are the payloads): compress, reproject and
    decompress give P^ Q^T with P^ = orth(M Q^), Q = M^T P^, per matrix of the
    concatenation, against a float64 QR transcription; Q is kept as the warm
    start; the shared memory's add/keep keeps E = M - P^ Q^T exactly."""
    from minips.distributed.compression import ErrorFeedback, LowRank, Payload
    rng = np.random.default_rng(3)
    shapes, r = [(12, 9), (7, 20)], 2
    C = LowRank(shapes, r, seed=1)
    Q0 = [q.astype(np.float64) for q in C.Q]
    g = rng.standard_normal(C.size).astype(np.float32)
    mem = ErrorFeedback(C.size)
    mem.m[...] = rng.standard_normal(C.size).astype(np.float32)
    m0 = mem.m.copy()
    v = mem.add(g)
    p = C.compress(v, 0).arrays[0]
    q = C.reproject(v, p, 0).arrays[0]
    out = C.decompress(Payload((p, q), C.size, 0))
    mem.keep(v, out)
    assert p.size + q.size == C.payload_bytes(C.size) // 4 == r * sum(n + m for n, m in shapes)
    pos = ppos = 0
    for k, (n, m) in enumerate(shapes):
        M = (m0 + g)[pos:pos + n * m].reshape(n, m).astype(np.float64)
        Ph, _ = np.linalg.qr(M @ np.linalg.qr(Q0[k])[0])
        Qn = M.T @ Ph
        np.testing.assert_allclose(out[pos:pos + n * m].reshape(n, m), Ph @ Qn.T, rtol=1e-4, atol=1e-5)
        Ph32 = p[ppos:ppos + n * r].reshape(n, r).astype(np.float64)  # P^, orthogonalised in place
        np.testing.assert_allclose(Ph32.T @ Ph32, np.eye(r), atol=1e-5)
        np.testing.assert_allclose(C.Q[k], M.T @ Ph32, rtol=1e-4, atol=1e-5)  # the warm start: M^T P^
        pos, ppos = pos + n * m, ppos + n * r
    np.testing.assert_array_equal(mem.m, (m0 + g) - out)


def test_powersgd_uses_the_shared_compressor_and_memory():
    """PowerSGD's error is the shared ErrorFeedback (or NoMemory) and its power
    iteration the LowRank compressor: no memory of its own."""
    import minips as mp
    from minips.distributed.algorithms import make_algorithm
    from minips.distributed.comm import Comm
    from minips.distributed.compression import ErrorFeedback, LowRank, NoMemory
    from minips.optim import SGD
    p = mp.nn.Parameter(np.zeros((16, 12), np.float32))
    for ef, kind in ((True, ErrorFeedback), (False, NoMemory)):
        algo = make_algorithm("powersgd", [p], SGD([p], lr=0.1), Comm(), rank=2, error_feedback=ef)
        algo.start()
        assert isinstance(algo.compressor, LowRank) and isinstance(algo.memory, kind)
        assert not hasattr(algo, "E")
