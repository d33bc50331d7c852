"""HDF5 checkpoints, written atomically.

A checkpoint holds everything needed to continue a run on the same trajectory:
the flat weights, the optimizer state (momentum buffer, learning rate), the
algorithm state (for pseudo-sync: completed-but-unapplied averaged gradients,
the weights they were computed at, the predictor state), the step (which fixes
the epoch and the position in the sampler's permutation), every rank's RNG
state, and the metrics history.

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

__all__ = ["save", "load", "write_tree", "read_tree", "CheckpointError"]

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
    try:
        with h5py.File(path, "r") as f:
            version = f.attrs.get("minips_checkpoint_version")
            if version is None:
                raise CheckpointError(f"{path} is an HDF5 file but not a minips checkpoint")
            if int(version) != FORMAT_VERSION:
                raise CheckpointError(f"{path} has checkpoint format {version}; this minips reads {FORMAT_VERSION}")
            return read_tree(f)
    except OSError as e:
        raise CheckpointError(f"{path} is not a readable HDF5 checkpoint ({e})") from None
