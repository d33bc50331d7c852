"""The runs behind tests/test_bitwise_refactor.py: every registered algorithm
(and every predictor of pseudo-sync, every compressor of top-k SGD) from a
spec that writes each option out, so a change of defaults cannot hide a
change of numerics; six steps of the MLP on the mini set, seed 0, with
options that make every method communicate within those steps, one Numba and
BLAS thread per rank whatever the machine's load."""
import csv
import hashlib
from pathlib import Path

import numpy as np

STEPS = 6

#: one explicit spec per registered algorithm (each option written out)
ALGOS = [
    "sync",
    "overlap-sync:bucket-mb=1.0",
    "local-sgd:period=2:average-momentum=false",
    "post-local-sgd:period=2:average-momentum=false:switch-step=1",
    "aperiodic-local-sgd:schedule=growing:h0=2:gamma=0.5:average-momentum=false",
    "stl-sgd:t1=2:k1=2:data=iid:gamma=0.0",
    "adaptive-batch:period=2:theta=0.9:max-batch=0:lr-rule=constant",
    "overlap-local-sgd:period=2:alpha=0.5:rule=pull:consensus=piggyback",
    "d-psgd:topology=ring:form=cta:seed=0:radius=0.0",
    "gossip-pga:period=2:topology=ring:seed=0:radius=0.0",
    "gossip-aga:h0=2:h-max=32:power=0.5:topology=ring:seed=0:radius=0.0",
    "pd-sgd:i1=2:i2=1:i1-decay=0:i1-min=0:topology=ring:seed=0:radius=0.0",
    "gossipgrad:pattern=dissemination:seed=2403",
    "elastic-gossip:p=1.0:alpha=0.5:period=1:seed=0",
    "sgp:topology=auto:seed=0:radius=0.0",
    "gradient-tracking:topology=ring:seed=0:radius=0.0:form=cta",
    "gt-pga:topology=ring:seed=0:radius=0.0:form=cta:period=2",
    "dng:topology=ring:seed=0:radius=0.0:rule=paper:c=0.0:momentum=0.9",
    "hetero-gossip:topology=ring:seed=0:radius=0.0:balance=true:favour-fast=true",
    "topk-sgd:compressor=topk:error-feedback=true",
    "qsgd:compressor=qsgd-quant:error-feedback=false",
    "powersgd:rank=2:start=0:error-feedback=true:seed=0",
    "gs-sgd:k=0:ratio=0.01:rows=5:cols=0:second-round=true:seed=0",
    "gaussian-avg:reading=projection:ratio=0.05:block=256:seed=0:error-feedback=false:period=2:sigma=1.0",
    "pqasgd:period=2:compressor=qsgd-quant:error-feedback=false",
    "ssd-sgd:period=2:warmup=-1",
    "qprsgd:period=2:compressor=qsgd-quant:error-feedback=false:mode=allreduce:topology=ring:seed=0:radius=0.0",
    "choco-sgd:topology=ring:gamma=0.5:compressor=sign:seed=0:radius=0.0",
]
PREDICTORS = ["last", "ema", "holt", "lookahead", "adaptive", "local", "adaptive-local", "local-rewind",
              "layerwise-local", "local-pull", "spike", "dc-asgd", "gap-aware"]
COMPRESSORS = ["identity", "fp16", "topk", "randomk", "sign", "qsgd-quant", "countsketch", "gaussian"]

SPECS = (ALGOS + [f"pseudo-sync:predictor={p}:staleness=1@ps-{p}" for p in PREDICTORS]
         + [f"topk-sgd:compressor={c}:error-feedback=true@topk-{c}" for c in COMPRESSORS]
         + ["pseudo-sync:predictor=adaptive:staleness=2:rho=0.9:adapt-lambda=false@ps-adaptive-2"])


def blas_core() -> str:
    """NumPy's BLAS library and the CPU kernel it chose (float32 GEMM bits depend on it)."""
    try:
        from threadpoolctl import threadpool_info
        return ";".join(f"{i.get('internal_api')}:{i.get('architecture')}" for i in threadpool_info()
                        if i.get("user_api") == "blas" and "numpy" in str(i.get("filepath")))
    except ImportError:  # pragma: no cover - threadpoolctl comes with the test extra's deps
        return "unknown"


def run_specs(specs, P, out) -> dict:
    """Run ``compare`` over ``specs`` on ``P`` ranks (P = 1: one process; else
    virtual ranks) and return label -> {"weights": [sha256 per rank], "loss": last loss}."""
    from minips.checkpoint import load
    from minips.cli import main
    args = ["compare", "--model", "mlp", "--data", "fashion-mnist-mini", "--epochs", "1",
            "--max-steps", str(STEPS), "--batch-size", "16", "--seed", "0", "--quiet", "--no-trace", "--no-figures",
            "--checkpoint-every", str(STEPS), "--out", str(out), "--algos", ",".join(specs)]
    if P > 1:
        args += ["--virtual-ranks", str(P)]
    # one Numba and one BLAS thread: a one-rank run otherwise takes as many threads as the load leaves
    # free cores (kernels/threads.py), virtual ranks leave BLAS at whatever the process last set, and
    # the bits of a parallel reduction (a BLAS dot or gemv, a Numba prange sum) follow the thread count.
    # (Not through NUMBA_NUM_THREADS: Numba refuses a new value once its pool has started.)
    from threadpoolctl import threadpool_limits

    from minips.kernels import threads
    wanted = threads.threads_per_rank
    threads.threads_per_rank = lambda ranks_on_node=1, cores=None: 1
    try:
        with threadpool_limits(1):
            rc = main(args)
    finally:
        threads.threads_per_rank = wanted
    if rc != 0:
        raise RuntimeError(f"compare on {P} rank(s) returned {rc}")
    got = {}
    for run in sorted(p for p in Path(out).iterdir() if (p / "checkpoint.h5").exists()):
        state = load(run / "checkpoint.h5")
        ws = [r["weights"] for r in state["ranks"]] if state.get("per_rank") else [state["weights"]]
        digests = [hashlib.sha256(np.ascontiguousarray(w, dtype=np.float32).tobytes()).hexdigest() for w in ws]
        loss = None
        if (run / "metrics.csv").exists():
            rows = list(csv.DictReader(open(run / "metrics.csv")))
            loss = rows[-1].get("train_loss") if rows else None
        got[run.name] = {"weights": digests, "loss": loss}
    return got
