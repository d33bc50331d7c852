"""The kernels as plain Python (NUMBA_DISABLE_JIT=1), the on-disk compile cache
(a second process does not recompile), and the choice of threads per rank."""
import os
import subprocess
import sys
import textwrap

import pytest

from minips.kernels import threads

SMALL_CASE = textwrap.dedent("""
    import numpy as np
    from minips.kernels import conv, pool, elementwise, loss, reference as ref
    from minips.distributed.algorithms import aesp, predictor_base
    assert type(conv._im2col).__name__ == "function", type(conv._im2col)   # not a Numba dispatcher
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 2, 5, 4)); w = rng.standard_normal((3, 2, 3, 2)); b = rng.standard_normal(3)
    for direct, stride in ((True, 1), (False, (2, 1))):
        y, saved = conv.conv2d_forward(x, w, b, stride, 1, direct=direct)
        assert np.allclose(y, ref.conv2d_forward(x, w, b, stride, 1))
        gx, gw, gb = conv.conv2d_backward(np.ones_like(y), w, saved)
        assert np.allclose(gx, ref.conv2d_backward_data(np.ones_like(y), w, x.shape, stride, 1))
        assert np.allclose(gw, ref.conv2d_backward_weight(np.ones_like(y), x, w.shape, stride, 1)[0])
    y, am = pool.maxpool2d_forward(x, 2, 2)
    assert np.array_equal(am, ref.maxpool2d_forward(x, 2, 2)[1])
    assert np.allclose(pool.maxpool2d_backward(y, am, x.shape), ref.maxpool2d_backward(y, am, x.shape))
    assert np.allclose(pool.avgpool2d_forward(x, 2, 1), ref.avgpool2d_forward(x, 2, 1))
    assert np.array_equal(elementwise.relu_forward(x), ref.relu_forward(x))
    z = rng.standard_normal((4, 3)); lab = np.array([0, 2, 1, 2])
    assert np.isclose(loss.softmax_xent_forward(z, lab)[0], ref.softmax_xent_forward(z, lab)[0])
    # the predictors' loops (in their own files, not kernels/) run as Python too
    assert type(aesp._aesp_loop).__name__ == "function"
    G, Gn, F, c = (rng.standard_normal(7).astype(np.float32) for _ in range(4))
    s = predictor_base.arrival_sums(G, Gn, F, c)
    G64, F64, c64 = G.astype(float), F.astype(float), c.astype(float)
    assert np.isclose(s["FG"], F64 @ G64) and np.isclose(s["ac"], (G64 - Gn.astype(float)) @ c64)
    h = rng.random(7).astype(np.float32)
    st = [rng.random(7).astype(np.float32) for _ in range(4)] + [h.copy()]
    Fk, ck = aesp.aesp_step(G, Gn, F, *st, 0.5, 0.9, 1e-12, 50.0)
    assert np.allclose(ck, h * (Gn - F), atol=1e-6) and np.allclose(Fk, G + 0.5 * ck, atol=1e-6)
    print("plain python ok")
""")


def _run(code, env, timeout=120):
    e = dict(os.environ)
    e.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e,
                          timeout=timeout)


def test_kernels_run_as_plain_python_with_jit_disabled():
    r = _run(SMALL_CASE, {"NUMBA_DISABLE_JIT": "1"})
    assert r.returncode == 0, r.stderr
    assert "plain python ok" in r.stdout


CACHE_PROBE = textwrap.dedent("""
    import numpy as np
    from minips.kernels import elementwise
    elementwise.relu_forward(np.ones(8, np.float32))
    s = elementwise._relu_forward.stats
    print(sum(s.cache_hits.values()), sum(s.cache_misses.values()))
""")


def test_second_process_loads_compiled_kernels_from_cache(tmp_path):
    env = {"NUMBA_CACHE_DIR": str(tmp_path)}       # an empty cache: the first process compiles
    first = _run(CACHE_PROBE, env)
    assert first.returncode == 0, first.stderr
    assert first.stdout.split() == ["0", "1"]      # no hit, one compilation (a miss)
    second = _run(CACHE_PROBE, env)
    assert second.returncode == 0, second.stderr
    assert second.stdout.split() == ["1", "0"]     # loaded from disk, nothing compiled


def test_threads_per_rank_splits_the_node(monkeypatch):
    monkeypatch.delenv("NUMBA_NUM_THREADS", raising=False)
    assert threads.threads_per_rank(ranks_on_node=3, cores=8) == 2
    assert threads.threads_per_rank(ranks_on_node=1, cores=8) == 8
    assert threads.threads_per_rank(ranks_on_node=4, cores=2) == 1   # never 0
    monkeypatch.setenv("NUMBA_NUM_THREADS", "3")
    assert threads.threads_per_rank(ranks_on_node=4, cores=2) == 3   # the user's choice wins
    monkeypatch.setenv("NUMBA_NUM_THREADS", "zero")
    with pytest.raises(ValueError, match="not an integer"):
        threads.threads_per_rank()


def test_threads_for_load_uses_only_free_cores():
    from minips.kernels import threads
    assert threads.threads_for_load(2, 1, 2, 0.0) == (2, None)           # idle node: all cores
    n, why = threads.threads_for_load(2, 1, 2, 2.0)                       # two busy processes on 2 cores
    assert n == 1 and "2 other runnable" in why and "NUMBA_NUM_THREADS" in why
    assert threads.threads_for_load(8, 1, 16, 6.0) == (8, None)          # 8 + 6 <= 16: fits
    assert threads.threads_for_load(8, 2, 16, 6.0)[0] == 5               # (16 - 6) // 2
    assert threads.threads_for_load(4, 4, 16, 20.0)[0] == 1              # never 0
    assert threads.threads_for_load(1, 1, 2, 9.0) == (1, None)


def test_other_runnable_reads_loadavg_and_idle_threads_sleep():
    import os

    from minips.kernels import threads
    assert threads.other_runnable(mine=0, samples=1) >= 1.0   # this process is running while it reads
    assert threads.other_runnable(mine=10 ** 6, samples=1) == 0.0
    assert os.environ["OMP_WAIT_POLICY"] and os.environ["KMP_BLOCKTIME"]  # set on import of minips.kernels
