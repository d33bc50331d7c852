"""A run on virtual ranks equals the same run under ``mpiexec -n P``: the same
partition, initial weights, data order, losses, final weights and test
metrics, and the same bytes sent by every rank.

Each test runs ``compare`` twice with the same seed and options: once as
``mpiexec -n P python -m minips compare`` and once in this process with
``--virtual-ranks P``. Sums are bitwise MPICH's (tests/test_virtual.py), so
the runs agree to the last bit at P = 2 and 4 (asserted); at P = 8, where
every registered algorithm runs (one ``compare`` of them all: each ``mpiexec``
rank costs about 1.5 s of CPU to start, so one launch, not one per kind), the
losses are asserted within 1e-5 relative and the bytes sent equal. The two checks at
P = 4 run their compares in one ``mpiexec`` launch (:func:`run_many`).
"""
import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from minips.distributed.algorithms import ALGORITHMS

from .conftest import ROOT, cores_for_ranks, subprocess_env

#: the specs the issue names (pseudo-sync with both predictors, explicitly)
SPECS = ["sync", "local-sgd", "d-psgd:topology=ring", "sgp", "topk-sgd", "pseudo-sync:predictor=adaptive",
         "pseudo-sync:predictor=local"]

#: every registered algorithm at P = 8, with options that make it communicate within 4 steps
EVERY = {name: name for name in ALGORITHMS}
EVERY.update({
    "local-sgd": "local-sgd:period=2", "post-local-sgd": "post-local-sgd:period=2:switch-step=1",
    "aperiodic-local-sgd": "aperiodic-local-sgd:h0=2", "stl-sgd": "stl-sgd:t1=2",
    "adaptive-batch": "adaptive-batch:period=2", "overlap-local-sgd": "overlap-local-sgd:period=2",
    "gossip-pga": "gossip-pga:period=2", "gossip-aga": "gossip-aga:h0=2", "pd-sgd": "pd-sgd:i1=2",
    "gt-pga": "gt-pga:period=2", "gaussian-avg": "gaussian-avg:period=2", "qprsgd": "qprsgd:period=2",
})


def compare_args(out, algos, steps, *extra, checkpoint=True, batch=16):
    """``checkpoint``: write each run's final state once (10,000 steps between checkpoints is more than
    any run here has), for :func:`weights`; without it none (each rank's 8-rank state costs more than
    its steps)."""
    return ["compare", "--model", "mlp", "--epochs", "1", "--max-steps", str(steps), "--algos", ",".join(algos),
            "--batch-size", str(batch), "--quiet", "--no-figures", "--checkpoint-every", "10000" if checkpoint else "0",
            "--out", str(out),
            *extra]


def run_both(P, algos, steps, tmp_path, timeout=600, checkpoint=True, batch=16):
    """(virtual summaries, MPI summaries) of one compare, in the order of ``algos``."""
    return run_many(P, [(tmp_path, algos, steps, checkpoint, batch)], timeout)[0]


#: one MPI process running several compares one after the other (each rank starts once: about
#: 1.5 s of CPU per rank saved per compare); minips.cli.main aborts the job when a rank fails, as
#: ``python -m minips`` does
MANY = ("import json, sys\nfrom minips.cli import main\n"
        "for args in json.loads(sys.argv[1]):\n    code = main(args)\n    if code:\n        sys.exit(code)\n")


def run_many(P, jobs, timeout=600):
    """``jobs``: (folder, algos, steps, checkpoint, batch) compares, run in one ``mpiexec -n P``
    launch (into ``folder/mpi``) and then each here on P virtual ranks (into ``folder/virtual``);
    a list of (virtual summaries, MPI summaries), one pair per job."""
    from minips.cli import main
    exe = shutil.which("mpiexec")
    if exe is None:  # pragma: no cover - the mpi extra installs it
        pytest.fail("mpiexec not found: pip install -e '.[mpi,test]'", pytrace=False)
    mpi_args = [compare_args(d / "mpi", algos, steps, checkpoint=checkpoint, batch=batch)
                for d, algos, steps, checkpoint, batch in jobs]
    with cores_for_ranks(P):  # the tests' mpi marks say lock="in test": the virtual runs below need no lock
        proc = subprocess.run([exe, "-n", str(P), sys.executable, "-c", MANY, json.dumps(mpi_args)],
                              capture_output=True, text=True, timeout=timeout, env=subprocess_env(), cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for d, algos, steps, checkpoint, batch in jobs:
        assert main(compare_args(d / "virtual", algos, steps, "--virtual-ranks", str(P), checkpoint=checkpoint,
                                 batch=batch)) == 0
    return [[json.loads((d / side / "compare.json").read_text()) for side in ("virtual", "mpi")]
            for d, *_ in jobs]


def losses(run_dir) -> list[float]:
    return [float(r["loss"]) for r in csv.DictReader(open(Path(run_dir) / "trace.csv"))]


def weights(run_dir) -> list[np.ndarray]:
    """Every rank's final weights (or the one copy of identical replicas), from the checkpoint."""
    from minips.checkpoint import load
    state = load(Path(run_dir) / "checkpoint.h5")
    if state.get("per_rank"):
        return [np.asarray(r["weights"]) for r in state["ranks"]]
    return [np.asarray(state["weights"])]


def assert_same_runs(P, algos, tmp_path, virt, mpi):
    """Bit for bit: rank 0's loss at every step (same initial weights, same data
    order), every rank's final weights, the test metrics; and the partition and
    the bytes every rank sent."""
    from minips.compare import run_folder
    assert [s["label"] for s in virt] == [s["label"] for s in mpi]
    for v, m in zip(virt, mpi):
        label = v["label"]
        assert v["virtual"] is True and m["virtual"] is False
        assert v["world_size"] == m["world_size"] == P
        assert v["partition"] == m["partition"], label  # every rank's shard: size and class counts
        assert v["bytes_sent_per_rank"] == m["bytes_sent_per_rank"], label
        assert all(b > 0 for b in v["bytes_sent_per_rank"]), f"{label} sent nothing: the test checks no traffic"
        lv, lm = losses(run_folder(tmp_path / "virtual", label)), losses(run_folder(tmp_path / "mpi", label))
        wv, wm = weights(run_folder(tmp_path / "virtual", label)), weights(run_folder(tmp_path / "mpi", label))
        assert len(lv) == len(lm) == 10 and len(wv) == len(wm), label
        assert lv == lm, label
        assert all(np.array_equal(a, b) for a, b in zip(wv, wm)), label
        assert v["test_loss"] == m["test_loss"] and v["test_accuracy"] == m["test_accuracy"], label


@pytest.mark.mpi(ranks=2, lock="in test")
def test_virtual_equals_mpiexec_bitwise_at_P2(tmp_path):
    virt, mpi = run_both(2, SPECS, 10, tmp_path)
    assert_same_runs(2, SPECS, tmp_path, virt, mpi)


@pytest.mark.mpi(ranks=4, lock="in test")
def test_virtual_equals_mpiexec_bitwise_at_P4_and_over_an_mlp_epoch(tmp_path):
    """Beyond P = 2 a sum's order matters; it is MPICH's here, so the runs agree
    bit for bit (stricter than the 1e-5 the issue allows). Then a whole epoch of the
    MLP (batch 64 per rank: the mini set in 24 steps) reaches the MPI run's test
    accuracy. Both compares in one ``mpiexec`` launch (:func:`run_many`)."""
    short, epoch = tmp_path / "short", tmp_path / "epoch"
    (virt, mpi), (virt_e, mpi_e) = run_many(4, [(short, SPECS, 10, True, 16),
                                                (epoch, ["sync", "pseudo-sync:predictor=local"], 0, True, 64)])
    assert_same_runs(4, SPECS, short, virt, mpi)
    for v, m in zip(virt_e, mpi_e):
        assert v["epochs"] == m["epochs"] == 1
        assert v["test_accuracy"] == m["test_accuracy"] > 0.7, v["label"]


def _every(names, tmp_path):
    specs = [EVERY[n] for n in names]
    virt, mpi = run_both(8, specs, 4, tmp_path, timeout=1800, checkpoint=False)  # losses and bytes only
    for v, m in zip(virt, mpi):
        assert v["bytes_sent_per_rank"] == m["bytes_sent_per_rank"], v["label"]
        assert all(b > 0 for b in v["bytes_sent_per_rank"]), f"{v['label']} did not communicate in 4 steps"
        np.testing.assert_allclose(losses(tmp_path / "virtual" / _folder(v)), losses(tmp_path / "mpi" / _folder(m)),
                                   rtol=1e-5, err_msg=v["label"])


def _folder(summary):
    from minips.compare import run_folder
    return run_folder(Path("."), summary["label"]).name


@pytest.mark.mpi(ranks=8, lock="in test")
@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_every_algorithm_on_8_virtual_ranks_sends_what_mpi_sends(tmp_path):
    _every(list(ALGORITHMS), tmp_path)
