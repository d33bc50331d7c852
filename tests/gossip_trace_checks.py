"""Shared helpers of the gossip tests (gossipgrad, elastic-gossip, sgp): a run
of tests/gossip_trace_worker.py that records every rank's weights, gradients
and logs per step, and a stop + resume of ``python -m minips train`` on n ranks
compared bitwise with an uninterrupted run (on virtual ranks: the rules, not
MPI, are under test)."""
import json
from pathlib import Path

import numpy as np

from .conftest import run_ranks
from .local_sgd_checks import ranks, train

WORKER = str(Path(__file__).with_name("gossip_trace_worker.py"))
LR = 0.1  # the worker's default learning rate (plain SGD: momentum 0 unless given)


def trace_run(n, opts, tmp_path, timeout=120, expect_ok=True):
    """The worker on n virtual ranks (0: one); returns (dict of arrays + 'logs', proc)."""
    out = tmp_path / f"trace-{n}-{abs(hash(json.dumps(opts, sort_keys=True)))}.npz"
    proc = run_ranks(n, WORKER, json.dumps(opts), str(out), timeout=timeout)  # virtual ranks
    if not expect_ok:
        return None, proc
    assert proc.returncode == 0, proc.stderr[-3000:]
    z = np.load(out)
    run = {k: z[k] for k in z.files if k not in ("logs", "report")}
    run["logs"], run["report"] = json.loads(str(z["logs"])), json.loads(str(z["report"]))
    return run, proc


def stop_resume_is_bitwise_n(n, spec, tmp_path, stop, end, extra=()):
    """``stop_resume_is_bitwise`` of local_sgd_checks on n ranks: every rank's
    weights, momentum buffer and algorithm state, the metrics and the consensus
    distance match bitwise. Returns (the full run's summary, its checkpoint state)."""
    full, part = tmp_path / "full", tmp_path / "part"
    args = ["--algo", spec, *extra]
    r = train(n, [*args, "--max-steps", end, "--checkpoint-every", end, "--out", full])
    assert r.returncode == 0, r.stderr[-3000:]
    r = train(n, [*args, "--max-steps", stop, "--checkpoint-every", stop, "--out", part])
    assert r.returncode == 0, r.stderr[-3000:]
    r = train(n, [*args, "--max-steps", end, "--checkpoint-every", end, "--out", part,
                  "--resume", part / "checkpoint.h5"])
    assert r.returncode == 0, r.stderr[-3000:]
    (a, wa, va), (b, wb, vb) = ranks(full), ranks(part)
    assert int(a["step"]) == int(b["step"]) == end
    for x, y in zip(wa + va, wb + vb):
        assert np.array_equal(x, y)
    for x, y in zip(a["ranks"], b["ranks"]):
        for k, v in x["algorithm"].items():
            assert np.array_equal(np.asarray(v), np.asarray(y["algorithm"][k])), k
    sa, sb = (json.loads((d / "summary.json").read_text()) for d in (full, part))
    assert sa["replicated"] is False
    assert sa["test_loss"] == sb["test_loss"] and sa["consensus_distance"] == sb["consensus_distance"]
    return sa, a, full
