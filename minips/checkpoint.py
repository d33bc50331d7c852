"""HDF5 checkpoints, written atomically.

A checkpoint holds everything needed to continue a run on the same trajectory:
the flat weights, the optimizer state (momentum buffer, learning rate), the
algorithm state (for pseudo-sync: completed-but-unapplied averaged gradients,
the weights they were computed at, the predictor state), the step (which fixes
the epoch and the position in the sampler's permutation), every rank's RNG
state, the metrics history and the ``--eval-every`` validation curve.

Atomic write: rank 0 writes ``PATH.tmp``, flushes and fsyncs it, then renames it
over ``PATH`` (``os.replace`` is atomic on POSIX) and fsyncs the directory. A
crash at any moment leaves either the old checkpoint or the new one, never a
half-written file.

Nested state (dicts, lists, arrays, numbers, strings, None) is stored as
groups, datasets and attributes by :func:`write_tree` / :func:`read_tree`.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

__all__ = ["save", "load", "write_tree", "read_tree", "CheckpointError", "save_trainer", "restore_trainer"]

FORMAT_VERSION = 1


class CheckpointError(ValueError):
    """A checkpoint cannot be used for this run; the message says why and what to do."""


def write_tree(group, obj) -> None:
    """Store a nested dict into an h5py group (arrays -> datasets, lists -> groups
    with a ``__list__`` attribute, scalars/strings/None -> attributes)."""
    for key, v in obj.items():
        key = str(key)
        if isinstance(v, dict):
            write_tree(group.create_group(key), v)
        elif isinstance(v, (list, tuple)):
            g = group.create_group(key)
            g.attrs["__list__"] = len(v)
            write_tree(g, {str(i): x for i, x in enumerate(v)})
        elif isinstance(v, np.ndarray):
            group.create_dataset(key, data=v)
        elif v is None:
            group.attrs[key] = "__none__"
        elif isinstance(v, (bool, np.bool_)):
            group.attrs[key] = json.dumps(bool(v))
            group.attrs[key + "__bool__"] = 1
        else:
            group.attrs[key] = v


def read_tree(group) -> dict | list:
    """Inverse of :func:`write_tree`."""
    out = {}
    for key, v in group.attrs.items():
        if key == "__list__" or key.endswith("__bool__"):
            continue
        if isinstance(v, str) and v == "__none__":
            out[key] = None
        elif key + "__bool__" in group.attrs:
            out[key] = json.loads(v)
        else:
            out[key] = v.item() if isinstance(v, np.generic) else v
    for key, item in group.items():
        out[key] = read_tree(item) if hasattr(item, "keys") else item[...]
    if "__list__" in group.attrs:
        return [out[str(i)] for i in range(int(group.attrs["__list__"]))]
    return out


def save(path, state: dict) -> None:
    """Write ``state`` (a nested dict) to ``path`` atomically (temp + fsync + rename).

    Raises:
        OSError: the directory is not writable or the disk is full (the old
            checkpoint, if any, is left intact).
    """
    import h5py

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with h5py.File(tmp, "w") as f:
            f.attrs["minips_checkpoint_version"] = FORMAT_VERSION
            write_tree(f, state)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    finally:
        if tmp.exists():
            tmp.unlink()


def load(path) -> dict:
    """Read a checkpoint written by :func:`save`.

    Raises:
        CheckpointError: the file does not exist, is not HDF5, or is not a minips
            checkpoint (or of an unknown version).
    """
    import h5py

    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"checkpoint {path} does not exist")
    if path.is_dir():
        hint = f", e.g. {path / 'checkpoint.h5'}" if (path / "checkpoint.h5").exists() else ""
        raise CheckpointError(f"{path} is a directory: pass the checkpoint file{hint}")
    try:
        with h5py.File(path, "r") as f:
            version = f.attrs.get("minips_checkpoint_version")
            if version is None:
                raise CheckpointError(f"{path} is an HDF5 file but not a minips checkpoint")
            if int(version) != FORMAT_VERSION:
                raise CheckpointError(f"{path} has checkpoint format {version}; this minips reads {FORMAT_VERSION}")
            return read_tree(f)
    except (OSError, RuntimeError, KeyError, TypeError, ValueError) as e:
        if isinstance(e, CheckpointError):
            raise
        # h5py reports damage inside the file as OSError/RuntimeError/KeyError
        # ("addr overflow", "bad object header", ...) without the file's name
        raise CheckpointError(f"checkpoint {path} is corrupt or truncated ({e}); resume from an earlier "
                              "checkpoint, or start again without --resume") from None


#: What :func:`restore_trainer` needs from a checkpoint (save_trainer writes them all).
REQUIRED_KEYS = ("step", "world_size", "config", "rng", "history", "trace")


# --- a Trainer's state -------------------------------------------------------------------

#: Options that fix a run's trajectory or its metrics: a checkpoint resumes only with the same values
#: (``val_fraction`` holds images out of the training set; ``eval_every`` sets the validation curve's steps)
TRAJECTORY_KEYS = ("model", "data", "batch_size", "seed", "lr", "momentum", "nesterov", "weight_decay",
                   "clip_norm", "schedule", "warmup_epochs", "scale_lr", "epochs", "partition", "val_fraction",
                   "eval_every")
#: Trajectory options added after checkpoints were first written: the value an older checkpoint ran with
ADDED_LATER = {"partition": "iid", "clip_norm": 0.0, "val_fraction": 0.0, "eval_every": 0}


def save_trainer(trainer, path) -> None:
    """Write a checkpoint of the trainer's current step (collective: every rank
    must call it).

    In-flight requests are completed first (``algo.drain()``: results are kept,
    the trajectory does not change). When the algorithm keeps ranks identical,
    rank 0's weights, optimizer and algorithm state are stored, unless its
    state differs per rank (``algo.per_rank_state``, e.g. error feedback); otherwise every
    rank's (gathered to rank 0; ``per_rank`` = True). Every rank's RNG state is
    always stored. Rank 0 writes; the outcome is broadcast, so a failed write
    raises on every rank instead of leaving them hanging.

    Raises:
        minips.rundir.WriteError: the write failed (on every rank; one line
            naming the folder and the fix, e.g. free space on a full disk).
    """
    import dataclasses

    from . import random as mrandom
    from .rundir import json_default

    algo, comm = trainer.algo, trainer.comm
    algo.drain()
    rng_states = comm.allgather(json.dumps(mrandom.get_state()))
    per_rank = not algo.replicated or algo.per_rank_state
    mine = {"weights": algo.flat.weights.copy(), "optimizer": trainer.optimizer.state_dict(),
            "algorithm": algo.state_dict()}
    ranks = comm.gather_obj(mine, root=0) if per_rank else [mine]  # only rank 0 writes
    error = None
    if comm.rank == 0:
        state = {
            "step": trainer.global_step,
            # (epoch, next loader batch): not divmod(step, steps per epoch) when a
            # step consumes several batches (Algorithm.batches_per_step)
            "position": list(trainer.position or divmod(trainer.global_step, trainer.steps_per_epoch)),
            "world_size": comm.size, "per_rank": per_rank,
            "config": json.dumps(dataclasses.asdict(trainer.cfg)),
            "rng": rng_states,
            "history": json.dumps(trainer.history),
            # --eval-every's validation curve so far, and the seconds its mid-epoch evaluations took
            "curve": json.dumps(trainer.curve),
            "eval_every_s": float(trainer.eval_every_s),
            "trace": json.dumps(trainer.trace_rows, default=json_default),
            # the epoch in progress and the time so far: a resumed run's
            # metrics then cover the whole epoch and the whole run
            "epoch_losses": np.asarray(trainer.epoch_losses, np.float64),
            "epoch_seconds": trainer.epoch_seconds(),
            "wall_time_s": trainer.wall_seconds(),
            # Numba threads per rank: parallel reductions sum in an order that
            # depends on it, so a resume with another count leaves the trajectory
            # in the last bits (restore_trainer reuses it)
            "threads": int(getattr(trainer, "threads", 0) or 0),
        }
        if per_rank:
            state["ranks"] = ranks
        else:
            state.update(mine)
        try:
            save(path, state)
        except OSError as e:  # h5py's text is several lines of HDF5 internals: one line instead
            from .rundir import write_error
            error = str(write_error(path, e, "checkpoint "))
    error = comm.bcast_obj(error)
    if error:
        from .rundir import WriteError
        raise WriteError(error + " (the earlier checkpoint, if any, is kept as it was)")


def restore_trainer(trainer, path) -> None:
    """Load a checkpoint into a freshly built trainer (before ``algo.start()``).

    Raises:
        CheckpointError: missing/invalid file, a different number of ranks, or
            a run configuration (or algorithm and its options) that differs in
            what fixes the trajectory.
    """
    import dataclasses

    from . import random as mrandom
    from .config import TrainConfig, config_fields

    cfg, comm = trainer.cfg, trainer.comm
    state = load(path)
    missing = [k for k in REQUIRED_KEYS if k not in state]
    if not missing and not state.get("per_rank"):
        missing = [k for k in ("weights", "optimizer", "algorithm") if k not in state]
    if missing:
        raise CheckpointError(f"checkpoint {path} lacks {', '.join(map(repr, missing))} (damaged, or not written by "
                              "minips train); resume from another checkpoint, or start again without --resume")
    try:
        saved = json.loads(state["config"])
    except (TypeError, ValueError):
        raise CheckpointError(f"checkpoint {path} holds an unreadable run configuration; resume from another "
                              "checkpoint, or start again without --resume") from None
    if int(state["world_size"]) != comm.size:
        raise CheckpointError(
            f"checkpoint {path} was written by {state['world_size']} rank(s), this job has "
            f"{comm.size}; resume with mpiexec -n {state['world_size']} or --virtual-ranks {state['world_size']} "
            "(the data sharding and the averaged gradients depend on the number of ranks, so the trajectory "
            "cannot continue otherwise)")
    saved = {**ADDED_LATER, **saved}  # an older checkpoint ran with these options' values of then
    diff = [f"{k}: checkpoint {saved.get(k)!r}, now {getattr(cfg, k)!r}" for k in TRAJECTORY_KEYS
            if saved.get(k) != getattr(cfg, k)]
    # the fields, and the older per-option flags that checkpoints written before algo_options kept as fields
    known = {f.name for f in dataclasses.fields(TrainConfig)} | set(config_fields())
    then = TrainConfig(**{k: v for k, v in saved.items() if k in known}).resolve_algo()
    now = trainer.spec
    if (then.name, then.options_dict()) != (now.name, now.options_dict()):
        diff.append(f"algorithm: checkpoint {then.name} {then.options_dict()}, now {now.name} {now.options_dict()}")
    if diff:
        raise CheckpointError(f"checkpoint {path} was written by a different run configuration ("
                              + "; ".join(diff) + "); pass the same options to continue its trajectory")
    mine = state["ranks"][comm.rank] if state.get("per_rank") else state
    w = np.asarray(mine["weights"], np.float32)
    algo = trainer.algo
    if w.shape != algo.flat.weights.shape:
        raise CheckpointError(f"checkpoint {path} holds {w.size} weights, the model has "
                              f"{algo.flat.weights.size}")
    algo.flat.weights[...] = w
    opt = dict(mine["optimizer"])
    opt["buffers"] = list(opt["buffers"])
    trainer.optimizer.load_state_dict(opt)
    algo.load_state_dict(mine["algorithm"])
    mrandom.set_state(json.loads(state["rng"][comm.rank]))
    trainer.global_step = int(state["step"])
    if "position" in state:  # older checkpoints: the position is divmod(step, steps per epoch)
        trainer.position = tuple(int(v) for v in state["position"])
    trainer.history = json.loads(state["history"])
    trainer.trace_rows = json.loads(state["trace"])
    if "curve" in state:  # older checkpoints: no --eval-every curve
        trainer.curve = json.loads(state["curve"])
        trainer.eval_every_s = float(state["eval_every_s"])
    if "epoch_losses" in state:  # older checkpoints: the epoch's loss restarts at the resume
        trainer.epoch_losses = [float(v) for v in np.asarray(state["epoch_losses"]).reshape(-1)]
        trainer.epoch_seconds_before = float(state["epoch_seconds"])
        trainer.wall_before = float(state["wall_time_s"])
    _reuse_thread_count(trainer, int(state.get("threads", 0) or 0))


def _reuse_thread_count(trainer, saved: int) -> None:
    """Run with the checkpoint's Numba thread count, so that the resumed run
    continues the same trajectory bit for bit (a parallel reduction's order, and
    so its last bits, depend on the count). Not when the user chose a count with
    ``NUMBA_NUM_THREADS``, nor when the checkpoint is older than this field or
    asks for more threads than this process's pool holds (then a note says why
    the last bits may differ)."""
    import os
    import sys

    import numba

    from .kernels.threads import set_threads

    now = int(getattr(trainer, "threads", 0) or 0)
    if not saved or not now or saved == now or os.environ.get("NUMBA_NUM_THREADS"):
        return
    if getattr(trainer.comm, "virtual", False):  # a virtual rank keeps its one thread (P threads share the cores)
        if trainer.comm.rank == 0:
            print(f"minips: the checkpoint ran with {saved} Numba thread(s) per rank, virtual ranks use 1; the "
                  "resumed run may differ from an uninterrupted one in the last bits", file=sys.stderr, flush=True)
        return
    if saved > numba.config.NUMBA_NUM_THREADS:
        if trainer.comm.rank == 0:
            print(f"minips: the checkpoint ran with {saved} Numba thread(s) per rank, this process can use at most "
                  f"{numba.config.NUMBA_NUM_THREADS}; the resumed run may differ from an uninterrupted one in the "
                  "last bits", file=sys.stderr, flush=True)
        return
    trainer.threads = set_threads(saved)

