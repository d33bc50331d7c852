"""The run-folder layout: what ``train`` and ``compare`` write where, and how
``plot`` (and anything else) finds runs again.

A run folder (``train --out DIR``) holds::

    metrics.csv     one row per epoch (test metrics, seconds); partial = 1 marks an
                    epoch that --max-steps cut short (replaced when a resumed run
                    completes it)
    curve.csv       with --eval-every N: one row per evaluation on the validation split
                    (every N steps and at each epoch's end)
    summary.json    final numbers, options, timing breakdown, bytes sent
    trace.csv       one row per step (phases in seconds, loss, lr, bytes, diagnostics)
    checkpoint.h5   with --checkpoint-every or after a stop signal
    trace-diverged-rankR.csv   the trace up to a non-finite loss
    run.lock        while a run writes the folder: its pid and host (take_lock)

A ``compare --out DIR`` folder holds one run folder per ``--algos`` entry
(:func:`run_folder`), ``compare.md`` and ``compare.json`` (the summaries, in
order) and the figures, and ``run.lock`` while the compare runs (each run
also locks its own folder). Every file is written atomically
(:func:`atomic_write`, :func:`atomic_write_all`, :func:`atomic_savefig`); a
write that fails (a full disk) raises :class:`WriteError`, one line naming the
folder and the fix, and leaves no temporary file.
docs/runs.md describes the folder, the lock and resuming for users.
"""
from __future__ import annotations

import csv
import json
import math
import os
import socket
import time
from pathlib import Path

import numpy as np

__all__ = ["METRICS", "CURVE", "SUMMARY", "TRACE", "CHECKPOINT", "COMPARE_MD", "COMPARE_JSON", "run_folder",
           "diverged_trace", "load_run", "find_runs", "atomic_write", "csv_text", "json_default",
           "write_csv", "write_json", "LOCK", "RunFolderError", "RunLock", "take_lock", "release_lock_of",
           "check_unlocked", "METRICS_COLUMNS", "RUN_FILES", "run_files", "check_fresh", "clear_run_files",
           "WriteError", "write_error", "atomic_write_all", "atomic_savefig", "json_text"]

METRICS, SUMMARY, TRACE, CHECKPOINT = "metrics.csv", "summary.json", "trace.csv", "checkpoint.h5"
LOCK = "run.lock"
#: with --eval-every: one row per validation evaluation (mid-epoch and epoch end; summary.json's "curve")
CURVE = "curve.csv"
#: metrics.csv's columns when no epoch has a row yet (a header is always written)
METRICS_COLUMNS = ["epoch", "step", "train_loss", "seconds", "wall_time_s", "partial"]


class RunFolderError(ValueError):
    """The run folder cannot be used (not writable, or another run holds it); the message says what to do."""


class RunLock:
    """The lock of a run folder, held by this process (see :func:`take_lock`).

    Attributes:
        path: the lock file.
        replaced: the contents (pid, host, started) of a stale lock that was
            removed to take this one, or None.
        owner: what the lock file holds (pid, host, started): other ranks of
            the job are given it, so that a failing rank can remove the lock
            of the rank its abort kills (:func:`release_lock_of`).
    """

    def __init__(self, path: Path, replaced: dict | None = None, owner: dict | None = None):
        self.path, self.replaced = path, replaced
        self.owner = owner or {"pid": os.getpid(), "host": socket.gethostname()}

    def release(self) -> None:
        """Remove the lock file if it is still this process's."""
        release_lock_of(self.path, self.owner)


def release_lock_of(path, owner: dict) -> bool:
    """Remove the lock file ``path`` if it still holds ``owner``'s pid and host
    (never another run's lock); returns whether it was removed. Used by the
    process that took the lock, and by another rank of its job that fails:
    that rank's ``MPI_Abort`` may kill the lock's owner before it can remove it."""
    held = _read_lock(Path(path)) or {}
    if held.get("pid") != owner.get("pid") or held.get("host") != owner.get("host"):
        return False
    Path(path).unlink(missing_ok=True)
    return True


def _read_lock(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def _stale(other: dict | None, host: str) -> bool:
    """Whether a lock's contents name a process of this host that no longer runs."""
    return bool(other) and other.get("host") == host and isinstance(other.get("pid"), int) \
        and not _pid_alive(other["pid"])


def _in_use(out, lock: Path, other: dict | None, host: str) -> str:
    if other is None:
        who = "another run (its lock file is being written or unreadable)"
    else:
        who = f"another run: process {other.get('pid')} on host {other.get('host')}, started {other.get('started')}"
    gone = "" if other and other.get("host") == host else " (if that run is gone, delete the lock file)"
    return f"--out {out} is in use by {who}; lock file {lock}. Give this run another --out, or wait until that " \
           f"one ends{gone}"


def check_unlocked(out) -> None:
    """Refuse a folder that another run holds (a lock that is not stale), with
    the message of :func:`take_lock`; checked first by a run, so that a busy
    folder is reported as busy, not as one that holds a run's files. Only
    reads: the lock is taken later (:func:`take_lock`).

    Raises:
        RunFolderError: naming the other run and the lock file.
    """
    lock, host = Path(out) / LOCK, socket.gethostname()
    if lock.exists():
        other = _read_lock(lock)
        if not _stale(other, host):
            raise RunFolderError(_in_use(out, lock, other, host))


def take_lock(out) -> RunLock:
    """Create the run folder ``out`` (parents too) and take its lock: the file
    ``out/run.lock`` holding this process's pid and host, created exclusively
    (``O_EXCL``), so that two runs never write the same folder. Creating it
    also shows that the folder is writable, before any training. A lock left
    by a process that no longer runs on this host (killed with SIGKILL, say)
    is stale and replaced; one from another host cannot be checked and is
    reported.

    Raises:
        RunFolderError: the folder cannot be created or written, or another
            run holds its lock (named by pid and host).
    """
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise RunFolderError(f"cannot create the output directory {out} ({e.strerror}); give --out a directory "
                             "you can write") from None
    lock, host = out / LOCK, socket.gethostname()
    me = {"pid": os.getpid(), "host": host, "started": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
    replaced = None
    for _ in range(3):
        try:
            fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            other = _read_lock(lock)
            if _stale(other, host):
                lock.unlink(missing_ok=True)  # stale: its process is gone
                replaced = other
                continue
            raise RunFolderError(_in_use(out, lock, other, host)) from None
        except OSError as e:
            raise RunFolderError(f"--out {out} is not writable ({e.strerror}); give --out a directory you can "
                                 "write, or fix its permissions") from None
        try:
            with os.fdopen(fd, "w") as f:
                f.write(json.dumps(me) + "\n")
        except OSError as e:
            lock.unlink(missing_ok=True)
            raise RunFolderError(f"--out {out}: cannot write {lock} ({e.strerror}); free space or give --out "
                                 "another directory") from None
        return RunLock(lock, replaced, me)
    raise RunFolderError(f"--out {out}: could not take the lock {lock}; another run keeps replacing it")
COMPARE_MD, COMPARE_JSON = "compare.md", "compare.json"


#: what train and compare write into a folder (glob patterns): what --overwrite clears
RUN_FILES = (METRICS, CURVE, SUMMARY, TRACE, CHECKPOINT, "trace-diverged-rank*.csv", "*.tmp", COMPARE_MD, COMPARE_JSON,
             "accuracy.png", "breakdown.png", "trace.png", "consensus.png", "accuracy-bytes.png",
             "accuracy-traffic.png", "traffic.png")  # traffic.png: drawn by earlier versions, still cleared


def run_files(out) -> list[Path]:
    """The files of an earlier run in folder ``out`` (:data:`RUN_FILES`; for a
    ``compare`` folder also those of its run subfolders), sorted."""
    d = Path(out)
    if not d.is_dir():
        return []
    found = {f for pat in RUN_FILES for f in d.glob(pat) if f.is_file()}
    for sub in d.iterdir():
        if sub.is_dir() and ((sub / SUMMARY).exists() or (sub / METRICS).exists() or (sub / TRACE).exists()):
            found.update(f for pat in RUN_FILES for f in sub.glob(pat) if f.is_file())
    return sorted(found)


def check_fresh(out, overwrite: bool = False, resume: bool = False, flag: str = "--out") -> None:
    """Refuse to write a run into a folder that already holds one: its old
    ``trace.csv`` (or metrics, figures) would be left beside the new run's
    files and be read as the new run's (``plot`` would draw both). Allowed
    with ``overwrite`` (the old files are removed by :func:`clear_run_files`)
    or ``resume`` (the resumed run rewrites them).

    Raises:
        FileExistsError: naming the folder, a few of its files and the choices.
    """
    if overwrite or resume:
        return
    old = run_files(out)
    if old:
        shown = ", ".join(str(f.relative_to(out)) for f in old[:4]) + (", ..." if len(old) > 4 else "")
        raise FileExistsError(f"{flag} {out} already holds a run ({shown}); give a new {flag}, add --overwrite "
                              "to replace it, or --resume CHECKPOINT to continue it")


def clear_run_files(out) -> list[Path]:
    """Remove the files of an earlier run from ``out`` (:func:`run_files`; other
    files are left alone), and run subfolders left empty; returns what was removed."""
    old = run_files(out)
    for f in old:
        f.unlink(missing_ok=True)
    for sub in {f.parent for f in old} - {Path(out)}:
        try:
            sub.rmdir()
        except OSError:  # not empty: something else lives there
            pass
    return old


def run_folder(out, label: str) -> Path:
    """Where ``compare`` writes the run of the ``--algos`` entry ``label``
    (colons, which separate spec options, become dashes; ``=`` is kept)."""
    return Path(out) / label.replace(":", "-").replace("/", "-")


def diverged_trace(out, rank: int) -> Path:
    """Where rank ``rank`` writes its trace when the loss became non-finite."""
    return Path(out) / f"trace-diverged-rank{rank}.csv"


def load_run(run_dir) -> dict:
    """``{"name", "summary", "trace"}`` of a run directory (trace may be empty).

    Raises:
        FileNotFoundError: no summary.json in ``run_dir`` (not a finished run).
    """
    d = Path(run_dir)
    if not (d / SUMMARY).exists():
        raise FileNotFoundError(f"{d} has no summary.json: is it the --out directory of a finished run?")
    summary = json.loads((d / SUMMARY).read_text())
    trace = []
    if (d / TRACE).exists():
        with open(d / TRACE) as f:
            trace = list(csv.DictReader(f))
    return {"name": summary.get("label") or d.name, "summary": summary, "trace": trace}


def find_runs(paths) -> list[Path]:
    """The run directories in ``paths``: each path that holds a ``summary.json``,
    or else its subdirectories that do (a ``compare`` output: in the order of its
    ``compare.json`` when there is one, then sorted by name).

    Raises:
        FileNotFoundError: a path that does not exist, or holds no run at all.
    """
    runs = []
    for d in map(Path, paths):
        if (d / SUMMARY).exists():
            runs.append(d)
            continue
        if not d.is_dir():
            raise FileNotFoundError(f"{d} does not exist: give the --out directory of a train or compare run")
        subs = sorted(c for c in d.iterdir() if (c / SUMMARY).exists())
        if not subs:
            raise FileNotFoundError(f"{d} has no summary.json and no subdirectory with one: give the --out "
                                    "directory of a finished train or compare run")
        order = []
        if (d / COMPARE_JSON).exists():
            try:
                listed = [run_folder(d, s["label"]) for s in json.loads((d / COMPARE_JSON).read_text())]
            except (ValueError, TypeError, KeyError):
                listed = []
            order = [c for c in listed if c in subs]
        runs.extend(order + [c for c in subs if c not in order])
    return runs


def _finite(obj):
    """``obj`` with every non-finite float replaced by None (JSON has no NaN)."""
    if isinstance(obj, float | np.floating):
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    return obj


def json_default(o):
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def csv_text(keys, rows) -> str:
    import io
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=keys, extrasaction="ignore")
    w.writeheader()
    for r in rows:
        w.writerow(r)
    return buf.getvalue()


class WriteError(RunFolderError):
    """A file of a run (or of compare, bench study) could not be written: the
    disk is full, the folder read-only ... (:func:`write_error`). The message
    is one line naming the file, why and the fix."""


def write_error(path, e: OSError, what: str = "") -> WriteError:
    """The one-line :class:`WriteError` for ``e``, raised while writing
    ``path`` (``what``: e.g. "checkpoint "). A full disk (ENOSPC, or a quota:
    EDQUOT) names the folder to free space in; a read-only or forbidden folder
    says to give another one. h5py's errors carry the errno but a multi-line
    text of HDF5 internals: only the C library's message is kept."""
    import errno
    folder = Path(path).parent
    why = e.strerror or str(e).splitlines()[0]
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        why = os.strerror(e.errno)
        fix = (f"free space on the disk that holds {folder} (see df -h {folder}), or give --out a folder on "
               "another disk, and run again")
    elif e.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        why = os.strerror(e.errno)
        fix = "give --out a folder you can write, or fix its permissions, and run again"
    else:
        fix = f"check the disk that holds {folder}, or give --out a folder on another disk, and run again"
    return WriteError(f"cannot write {what}{path} ({why}); {fix}")


def _tmp_of(path: Path) -> Path:
    return path.with_name(f"{path.name}.{os.getpid()}.tmp")  # one per process: writers never share one


def _discard(tmps) -> None:
    for tmp in tmps:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass


def atomic_write_all(files: dict) -> None:
    """Write several files (``{path: text}``) all or none: every text goes to
    its temporary file (flushed, fsynced) first, and only then are they
    renamed into place, so a full disk leaves every file as it was (a run's
    summary.json never stands beside a missing trace.csv, compare.md never
    beside an older compare.json).

    Raises:
        WriteError: as :func:`atomic_write`; no temporary file is left.
    """
    done = []
    path = None
    try:
        for path, text in files.items():
            path = Path(path)
            tmp = _tmp_of(path)
            done.append(tmp)
            with open(tmp, "w") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
        for path in files:
            path = Path(path)
            os.replace(_tmp_of(path), path)
    except BaseException as e:  # a full disk, or an interruption mid-write: no temporary file is left
        _discard(done)
        if isinstance(e, OSError):
            raise write_error(path, e) from None
        raise


def atomic_savefig(fig, path, **kwargs) -> None:
    """``fig.savefig(path, **kwargs)`` atomically (a temporary file renamed
    into place; the format from ``path``'s suffix).

    Raises:
        WriteError: as :func:`atomic_write`; no temporary or partial figure is left.
    """
    path = Path(path)
    tmp = _tmp_of(path)
    try:
        fig.savefig(tmp, format=path.suffix.lstrip(".") or None, **kwargs)
        os.replace(tmp, path)
    except BaseException as e:
        _discard([tmp])
        if isinstance(e, OSError):
            raise write_error(path, e) from None
        raise


def atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file beside it
    (``NAME.PID.tmp``), flushed, fsynced and renamed over ``path``, so a crash
    never leaves half a file: ``path`` is either the old version or the new one.

    Raises:
        WriteError: the write failed (a full disk, a read-only folder: one
            line naming the folder and the fix); the temporary file is removed
            and ``path`` is left as it was.
    """
    atomic_write_all({Path(path): text})



def write_csv(path: Path, rows: list[dict], keys=None) -> None:
    """Rows (dicts) as CSV, atomically; columns: ``keys`` or every key any row has."""
    keys = list(keys) if keys is not None else list(dict.fromkeys(k for r in rows for k in r))
    atomic_write(Path(path), csv_text(keys, rows))


def json_text(obj) -> str:
    """``obj`` as indented, valid JSON (NumPy scalars become numbers; NaN and
    infinities, which JSON lacks, become null)."""
    return json.dumps(_finite(obj), indent=2, default=json_default, allow_nan=False) + "\n"


def write_json(path: Path, obj) -> None:
    """``obj`` as indented, valid JSON (:func:`json_text`), atomically."""
    atomic_write(Path(path), json_text(obj))
