"""The compression methods (topk-sgd, qsgd, powersgd, gs-sgd, gaussian-avg).

Exact equivalences on 2 ranks (tests/mpi_worker.py: MLP 20-16-4, d = 404,
synthetic data, SGD with momentum), all BITWISE: with two ranks every
float32 sum is one commutative addition, so the allgather's local sum
``0 + g_0 + g_1`` and MPI's allreduce ``g_0 + g_1`` agree to the last bit
(at P >= 3 the order of the additions may differ: ulps). PowerSGD is checked
against a NumPy transcription of its Algorithm 1 (QR instead of
Gram-Schmidt); bytes per step against sizes computed here from the layer
shapes; checkpoint + resume bitwise (error-feedback memories included).
"""
import csv
import json
import math

import numpy as np
import pytest

from minips.distributed.algorithms import resolve

from minips.plots import find_runs

from .conftest import cli_on_ranks
from .local_sgd_checks import train
from .test_mpi import launch

RUN = {"steps": 10, "batch": 8}
D_MLP = 203530                 # the mini set's MLP: 784*256 + 256 + 256*10 + 10
SHAPES = [(784, 256), (256,), (256, 10), (10,)]


def test_identity_and_full_k_equal_sync_bitwise_on_two_ranks(tmp_path):
    sync, _ = launch(2, {"algo": "sync", **RUN}, tmp_path)
    for spec in ("topk-sgd:compressor=identity", "topk-sgd:k=404", "gs-sgd:k=404:cols=404",
                 "powersgd:rank=16"):  # rank 16: no factor is smaller than its matrix, all go uncompressed
        run, _ = launch(2, {"algo": spec, **RUN}, tmp_path)
        assert np.array_equal(run["weights"], sync["weights"]), spec
        assert len(set(run["hashes"].tolist())) == 1, spec
    run, _ = launch(2, {"algo": "topk-sgd", **RUN}, tmp_path)  # the check can fail: 1% top-k is not sync
    assert not np.allclose(run["weights"], sync["weights"], rtol=1e-4, atol=1e-5)


def test_kernel_reading_with_wide_kernel_is_local_sgd(tmp_path):
    local, _ = launch(2, {"algo": "local-sgd:period=4", **RUN}, tmp_path)
    wide, _ = launch(2, {"algo": "gaussian-avg:kernel:period=4:sigma=1e9", **RUN}, tmp_path)
    np.testing.assert_allclose(wide["weights"], local["weights"], rtol=1e-6, atol=1e-7)
    narrow, _ = launch(2, {"algo": "gaussian-avg:kernel:period=4:sigma=1e-4", **RUN}, tmp_path)
    assert not np.allclose(narrow["weights"], local["weights"], rtol=1e-4, atol=1e-5)


def _one_rank(spec, tmp_path):
    """tests/mpi_worker.py's run in this process (one rank, no mpiexec)."""
    from .mpi_worker import main
    out = tmp_path / f"{abs(hash(spec))}.npz"
    main({"algo": spec, **RUN}, out)
    return np.load(out)


def test_one_rank(tmp_path):
    plain = _one_rank("sync", tmp_path)
    for spec in ("topk-sgd:compressor=identity", "topk-sgd:k=404", "qsgd:compressor=identity",
                 "gs-sgd:k=404:cols=404", "gaussian-avg:kernel"):  # the average of one model is itself
        assert np.array_equal(_one_rank(spec, tmp_path)["weights"], plain["weights"]), spec
    for spec in ("topk-sgd:compressor=randomk", "qsgd", "powersgd", "gs-sgd", "gaussian-avg"):
        run = _one_rank(spec, tmp_path)
        assert np.all(np.isfinite(run["weights"])) and int(run["steps"]) == RUN["steps"], spec
        assert not np.array_equal(run["weights"], plain["weights"]), spec


def test_powersgd_follows_its_algorithm_1():
    """One rank, plain SGD (lr 1, no momentum), two steps from given gradients:
    the weight change is the rank-r approximation P^ Q^T of M = G + E with
    warm start, E = M - P^ Q^T; vectors and non-shrinking matrices exact."""
    import minips as mp
    from minips.distributed.algorithms import make_algorithm
    from minips.distributed.comm import Comm
    from minips.models import MLP
    from minips.optim import SGD
    mp.random.seed(0)
    model = MLP(30, (20,), 6)
    params = list(model.parameters())
    algo = make_algorithm("powersgd", params, SGD(params, lr=1.0, momentum=0.0), Comm(), rank=2)
    algo.start()
    rng = np.random.default_rng(5)
    shapes = [p.shape for p in params]
    Q = {i: algo.compressor.Q[k].astype(np.float64).copy()  # the random start
         for k, (i, _, _) in enumerate(algo.mats)}
    E = {i: np.zeros((n, m)) for i, n, m in algo.mats}
    r = 2
    for _ in range(2):
        G = [rng.standard_normal(s).astype(np.float32) for s in shapes]
        w0 = [p.data.copy() for p in params]
        algo.before_backward()
        for i, g in enumerate(G):
            algo.flat._view(algo.flat.grads[0], i)[...] = g
        algo.step()
        for i, (p, g) in enumerate(zip(params, G)):
            change = (w0[i] - p.data).astype(np.float64)
            if i in Q:
                n, m = E[i].shape
                M = g.reshape(n, m).astype(np.float64) + E[i]
                Ph, _ = np.linalg.qr(M @ Q[i])
                Q[i] = M.T @ Ph
                approx = Ph @ Q[i].T
                E[i] = M - approx
                np.testing.assert_allclose(change.reshape(n, m), approx, rtol=1e-3, atol=1e-4)
                assert r * (n + m) < n * m
            else:
                np.testing.assert_allclose(change, g, rtol=1e-5, atol=1e-6)
    assert len(algo.mats) >= 1 and len(algo.plain) >= 2



def _powersgd_float64(grads, Q0, ef):
    """PowerSGD's Algorithm 1 in float64, QR as the orthogonalisation: the
    approximation P^ Q^T of each step, from the same start Q0."""
    Q, E, out = Q0.astype(np.float64), 0.0, []
    for G in grads:
        M = G.astype(np.float64) + E
        Ph, _ = np.linalg.qr(M @ Q)
        Q = M.T @ Ph
        out.append(Ph @ Q.T)
        E = M - out[-1] if ef else 0.0
    return out


@pytest.mark.parametrize("r,top,scale", [
    (2, "span", 1.0), (4, "span", 1.0),  # the r largest singular values from 1 down to 1e-4, a tail below
    (4, "rank2", 1.0),                   # a gradient of rank 2 (singular values 1 and 1e-4) at rank 4
    (2, "span", 1e-3)])                  # the same spectrum times 1e-3: sigma^2 below Gram-Schmidt's eps
@pytest.mark.parametrize("ef", [True, False])
def test_powersgd_is_accurate_on_ill_conditioned_gradients(r, top, scale, ef):
    """One 64 x 48 matrix, one rank, SGD lr 1: 12 steps with the same gradient
    U diag(s) V^T (float32) against the float64 transcription of Algorithm 1.
    Without re-orthogonalising the warm-started Q (PyTorch's hook does it every
    step), Q = M^T P^ carries the singular values, so M Q's columns differ by
    (sigma_1 / sigma_r)^2 = 1e8 and float32 Gram-Schmidt loses the small ones
    (relative error 0.4-1 within a few steps), and a column of norm sigma^2
    below eps = 1e-8 is not normalised. A gradient of rank < r leaves columns
    of P that are pure rounding, which one Gram-Schmidt pass does not make
    orthogonal; a second pass does ("twice is enough")."""
    import minips as mp
    from minips.distributed.algorithms import make_algorithm
    from minips.distributed.comm import Comm
    from minips.optim import SGD
    n, m = 64, 48
    rng = np.random.default_rng(7)
    U, _ = np.linalg.qr(rng.standard_normal((n, n)))
    V, _ = np.linalg.qr(rng.standard_normal((m, m)))
    s = np.zeros(m)
    if top == "span":
        s[:r] = np.geomspace(1.0, 1e-4, r)
        s[r:] = np.geomspace(1e-5, 1e-6, m - r)
    else:
        s[:2] = (1.0, 1e-4)
    G = (scale * (U[:, :m] * s) @ V.T).astype(np.float32)
    p = mp.nn.Parameter(np.zeros((n, m), np.float32))
    algo = make_algorithm("powersgd", [p], SGD([p], lr=1.0, momentum=0.0), Comm(), rank=r, error_feedback=ef)
    algo.start()
    want = _powersgd_float64([G] * 12, algo.compressor.Q[0], ef)
    errors = []
    for t in range(12):
        w0 = p.data.copy()
        algo.before_backward()
        algo.flat.grads[0][...] = G.ravel()
        algo.step()
        got = (w0 - p.data).astype(np.float64)
        errors.append(np.linalg.norm(got - want[t]) / np.linalg.norm(want[t]))
    assert max(errors) < 1e-4, [f"{e:.2g}" for e in errors]

def _trace(d):
    with open(d / "trace.csv") as f:
        return list(csv.DictReader(f))


def _powersgd_bytes(r):
    floats = 0
    for s in SHAPES:
        n, m = (s[0], int(np.prod(s[1:]))) if len(s) > 1 else (None, None)
        floats += r * (n + m) if n is not None and r * (n + m) < n * m else int(np.prod(s))
    return 4 * floats


def test_bytes_per_step_equal_the_payload_sizes(tmp_path):
    """2 ranks, the mini set's MLP, 3 steps (replica hashes compared every step).
    At P = 2 a ring allreduce of n bytes sends n, and a ring allgather of
    blocks (n, n) sends n: bytes = payload."""
    k = math.ceil(0.01 * D_MLP)
    qs = 4 * math.ceil(D_MLP / 512) + math.ceil(5 * D_MLP / 8)          # s = 15: 5-bit codes + a norm per bucket
    want = {
        "topk-sgd": 8 * k,                                               # k values + k int32 indices
        "topk-sgd:compressor=randomk": 4 * k,                            # shared seed: values only
        "qsgd": qs,
        "powersgd": _powersgd_bytes(2),
        "gs-sgd": 4 * 5 * 4 * k + 4 * k,                                 # 5 x 4k sketch + k exact values
        "gaussian-avg": 4 * math.ceil(D_MLP / 256) * math.ceil(0.05 * 256),
    }
    out = tmp_path / "runs"
    proc = cli_on_ranks(2, ["compare", "--model", "mlp", "--quiet", "--max-steps", "3", "--check-replicas", "1",
                            "--algos", ",".join(want), "--no-figures", "--out", out], timeout=150)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = find_runs([out])
    assert len(runs) == len(want)
    sync_bytes = 4 * D_MLP
    for (spec, nbytes), run in zip(want.items(), runs):
        rows = _trace(run)
        assert [int(r["bytes_sent"]) for r in rows] == [nbytes] * 3, (spec, rows[0]["bytes_sent"], nbytes)
        assert [int(r["wire_bytes"]) for r in rows] == [nbytes] * 3, spec
        summary = json.loads((run / "summary.json").read_text())
        assert summary["bytes_sent_per_step"] == nbytes and nbytes < sync_bytes / 4, spec


@pytest.mark.parametrize("spec", ["topk-sgd:compressor=qsgd-quant:error-feedback=true", "powersgd"])
def test_checkpoint_and_resume_are_bitwise(spec, tmp_path):
    """6 steps in one go == 3 steps, checkpoint, resume to 6: every rank's weights,
    momentum and error-feedback memory (and PowerSGD's warm-start Q) bitwise;
    the quantizer's draws depend on (seed, rank, step) only."""
    from minips.checkpoint import load
    full, part = tmp_path / "full", tmp_path / "part"
    for args in (["--max-steps", 6, "--checkpoint-every", 6, "--out", full],
                 ["--max-steps", 3, "--checkpoint-every", 3, "--out", part],
                 ["--max-steps", 6, "--checkpoint-every", 6, "--out", part, "--resume", part / "checkpoint.h5"]):
        r = train(2, ["--algo", spec, *args])
        assert r.returncode == 0, r.stderr[-3000:]
    a, b = load(full / "checkpoint.h5"), load(part / "checkpoint.h5")
    assert a["per_rank"] is True and int(a["step"]) == int(b["step"]) == 6  # every rank's memory is stored
    def memories(rank_state):
        st = rank_state["algorithm"]
        return [np.asarray(st["memory"]["memory"])] if "memory" in st else [np.asarray(e) for e in st["E"]]
    for ra, rb in zip(a["ranks"], b["ranks"]):
        assert np.array_equal(ra["weights"], rb["weights"])
        assert np.array_equal(ra["optimizer"]["buffers"][0], rb["optimizer"]["buffers"][0])
        ma, mb = memories(ra), memories(rb)
        assert all(np.array_equal(x, y) for x, y in zip(ma, mb)) and any(np.abs(x).max() > 0 for x in ma)
    assert not np.array_equal(memories(a["ranks"][0])[0], memories(a["ranks"][1])[0])  # memories are per rank


@pytest.mark.parametrize("text,message", [
    ("topk-sgd:compressor=zip", "option compressor must be one of identity, fp16, topk"),
    ("topk-sgd:k=0", "topk: k must be >= 1"),
    ("topk-sgd:ratio=2", "topk: ratio must be in (0, 1]"),
    ("qsgd:s=0", "qsgd-quant: s must be an integer in 1..32767"),
    ("powersgd:rank=0", "rank must be >= 1"),
    ("powersgd:start=-1", "start must be >= 0"),
    ("gs-sgd:k=100:cols=50", "cols=50 makes the sketch too small for k=100"),
    ("gs-sgd:ratio=0", "ratio must be in (0, 1]"),
    ("gaussian-avg:reading=other", "option reading must be one of projection, kernel"),
    ("gaussian-avg:kernel:sigma=0", "sigma must be > 0"),
    ("topk-sgd:compressor=randomk:scale=true", "error feedback's memory grows without bound"),
    ("qsgd:compressor=randomk:error-feedback=true", "use scale=false with error feedback, or error-feedback=false"),
])
def test_bad_options_say_what_to_write(text, message):
    with pytest.raises(ValueError) as e:
        resolve(text)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_scaled_random_k_diverges_with_error_feedback_and_is_refused_only_there():
    """Why the pair is refused: with scale=true the residual v - C(v) is
    (1 - d/k) v_j at the kept entries, so the memory grows geometrically
    (d = 400, k = 4: from gradients of norm ~20 to > 1e10 in 100 steps);
    unscaled rand-k is a contraction and its memory stays near the gradients'
    size. Scaled random-k without error feedback, and unscaled with it, run."""
    from minips.distributed.compression import ErrorFeedback, make_compressor
    rng = np.random.default_rng(0)
    grads = [rng.standard_normal(400).astype(np.float32) for _ in range(100)]
    norms = {}
    for scale in (True, False):
        c, ef = make_compressor("randomk", k=4, scale=scale), ErrorFeedback(400)
        with np.errstate(over="ignore", invalid="ignore"):
            for t, g in enumerate(grads):
                ef.compress(c, g, t)
        norms[scale] = float(np.linalg.norm(ef.m))
    assert not norms[True] < 1e10 and norms[False] < 20 * 100  # at most the sum of the gradients' norms
    for ok in ("topk-sgd:compressor=randomk", "topk-sgd:compressor=randomk:scale=true:error-feedback=false",
               "qsgd:compressor=randomk", "topk-sgd:compressor=randomk:scale=false:error-feedback=true"):
        resolve(ok)
        launch_free_build(ok)


def test_k_larger_than_the_model_fails_at_build():
    with pytest.raises(ValueError, match="k=1000 exceeds the vector's size d=404"):
        launch_free_build("topk-sgd:k=1000")
    with pytest.raises(ValueError, match="k=1000 exceeds the model's size d=404"):
        launch_free_build("gs-sgd:k=1000")


def launch_free_build(spec):
    import minips as mp
    from minips.distributed.algorithms import build_algorithm
    from minips.distributed.comm import Comm
    from minips.models import MLP
    from minips.optim import SGD
    mp.random.seed(0)
    params = list(MLP(20, (16,), 4).parameters())
    return build_algorithm(spec, params, SGD(params, lr=0.1), Comm())


def test_cost_models_charge_compression_and_the_smaller_payload():
    """step_time = compute + compression + the exchange of the payload; on a slow
    network (10 Mb/s) every method beats sync, and with no network (alpha = beta = 0)
    top-k loses by exactly its modelled compression time."""
    from minips.distributed.costmodel import NetworkModel
    from minips.labs.projection import StepProfile
    prof = StepProfile(forward=0.01, backward=0.02, grad_bytes=4 * D_MLP)
    slow, free = NetworkModel(alpha=50e-6, beta=8e-7), NetworkModel(alpha=0.0, beta=0.0)
    sync = resolve("sync")
    for spec in ("topk-sgd", "qsgd", "powersgd", "gs-sgd", "gaussian-avg", "gaussian-avg:kernel"):
        s = resolve(spec)
        assert s.step_time(prof, 8, slow) < sync.step_time(prof, 8, slow), spec
        assert s.step_time(prof, 8, free) >= prof.compute, spec
    top = resolve("topk-sgd")
    from minips.distributed.compression import make_compressor
    c = make_compressor("topk", ratio=0.01)
    assert top.step_time(prof, 8, free) == pytest.approx(prof.compute + c.seconds(D_MLP, decodes=8))
