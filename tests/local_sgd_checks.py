"""Shared checks of the local-update methods (local-sgd, post-local-sgd,
aperiodic-local-sgd): ``python -m minips train`` runs on 2 virtual ranks (in
this process: the rules, not MPI, are under test) with a per-step consensus
distance, and a stop + resume compared bitwise with an uninterrupted run."""
import csv
import json

import numpy as np

from .conftest import cli_on_ranks

MLP = ["--model", "mlp", "--data", "fashion-mnist-mini", "--quiet", "--epochs", "1", "--batch-size", "16",
       "--lr", "0.05", "--consensus-every", "1"]
#: bytes one rank sends in a ring allreduce of the MLP's weights on 2 ranks (= the weights' bytes)
WEIGHT_BYTES = 814120


def train(n, args, timeout=120):
    """``python -m minips train MLP... ARGS`` on n virtual ranks in this process (0: one rank)."""
    return cli_on_ranks(n, ["train", *MLP, *args], timeout)


def trace(out) -> list[dict]:
    with open(out / "trace.csv") as f:
        return list(csv.DictReader(f))


def ranks(out):
    """(checkpoint state, [each rank's weights], [each rank's momentum buffer])."""
    from minips.checkpoint import load
    s = load(out / "checkpoint.h5")
    assert s["per_rank"] is True
    return (s, [np.asarray(r["weights"]) for r in s["ranks"]],
            [np.asarray(r["optimizer"]["buffers"][0]) for r in s["ranks"]])


def stop_resume_is_bitwise(spec, tmp_path, stop, end):
    """Train ``end`` steps on 2 ranks in one go, and ``stop`` steps + a resume to
    ``end``; assert every rank's weights, momentum buffer, the metrics and the
    consensus distance match bitwise. Returns (the uninterrupted run's trace
    rows, ranks() at the stop)."""
    full, part = tmp_path / "full", tmp_path / "part"
    r = train(2, ["--algo", spec, "--max-steps", end, "--checkpoint-every", end, "--out", full])
    assert r.returncode == 0, r.stderr[-3000:]
    r = train(2, ["--algo", spec, "--max-steps", stop, "--checkpoint-every", stop, "--out", part])
    assert r.returncode == 0, r.stderr[-3000:]
    at_stop = ranks(part)
    r = train(2, ["--algo", spec, "--max-steps", end, "--checkpoint-every", end, "--out", part,
                  "--resume", part / "checkpoint.h5"])
    assert r.returncode == 0, r.stderr[-3000:]
    (a, wa, va), (b, wb, vb) = ranks(full), ranks(part)
    assert int(a["step"]) == int(b["step"]) == end
    for x, y in zip(wa + va, wb + vb):
        assert np.array_equal(x, y)
    sa, sb = (json.loads((d / "summary.json").read_text()) for d in (full, part))
    assert sa["replicated"] is False
    assert sa["test_loss"] == sb["test_loss"] and sa["consensus_distance"] == sb["consensus_distance"]
    return trace(full), at_stop


def check_meetings(rows, averaged_rows, bytes_when_averaging):
    """Right after each averaging (``averaged_rows``, trace step indices) the
    replicas are identical (consensus distance 0) and the step logged the
    distance just before it (> 0) and sent ``bytes_when_averaging``; on every
    other step they differ and nothing was sent."""
    for r in rows:
        step, dist = int(r["step"]), float(r["consensus_distance"])
        if step in averaged_rows:
            assert dist == 0.0 and float(r["consensus_before_avg"]) > 0, r
            assert int(r["bytes_sent"]) == bytes_when_averaging, r
        else:
            assert dist > 0 and r["consensus_before_avg"] == "" and int(r["bytes_sent"]) == 0, r
