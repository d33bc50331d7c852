"""Find and load data sets by name or path.

Names: ``fashion-mnist-mini`` (committed, ``data/fashion-mnist-mini.h5``),
``fashion-mnist`` (built by ``python -m minips data fashion-mnist``, see
``data/README.md``), or a path to an ``.h5`` file with the same layout.
The data layer knows only these image sets; the tasks layer
(:func:`minips.tasks.make_task`), which knows every ``--data`` name, completes
the name list of an :class:`UnknownDataError` (see :meth:`UnknownDataError.with_names`).
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["ImageDataset", "load_image_dataset", "data_dirs", "known_names", "resolve_h5", "DATASETS",
           "UnknownDataError", "check_image_data"]

# name -> (file name, how to build it when missing)
DATASETS = {
    "fashion-mnist-mini": ("fashion-mnist-mini.h5",
                           "it is committed in data/; run from a clone of minips, or set MINIPS_DATA_DIR"),
    "fashion-mnist": ("fashion-mnist.h5",
                      "build it: apt-get install dataset-fashion-mnist && python -m minips data "
                      "fashion-mnist --from /usr/share/datasets/fashion-mnist --out data/fashion-mnist.h5"),
}


def data_dirs() -> list[Path]:
    """Where named data sets are looked for, in order: ``$MINIPS_DATA_DIR``,
    ``./data``, and the ``data/`` folder of the source tree minips runs from."""
    dirs = []
    if os.environ.get("MINIPS_DATA_DIR"):
        dirs.append(Path(os.environ["MINIPS_DATA_DIR"]))
    dirs.append(Path.cwd() / "data")
    dirs.append(Path(__file__).resolve().parents[2] / "data")
    unique, seen = [], set()
    for d in dirs:  # e.g. run from the source tree: ./data is the source tree's data/
        key = os.path.realpath(d)
        if key not in seen:
            seen.add(key)
            unique.append(d)
    return unique


def known_names() -> list[str]:
    """The image data set names of :data:`DATASETS`, sorted. Other ``--data``
    names (e.g. the captioner's ``moving-fmnist-captions``) belong to tasks,
    which this layer does not import; see :class:`UnknownDataError`."""
    return sorted(DATASETS)


class UnknownDataError(FileNotFoundError):
    """An unknown data set name or a missing .h5 path; the message lists the
    valid names.

    Args:
        template: the message, with ``{names}`` where the comma-separated names go
            (replaced literally, not by ``str.format``: a path may hold braces).
        names: the valid names known where the error was raised.

    Attributes:
        template, names (sorted list of str).
    """

    def __init__(self, template: str, names=()):
        self.template, self.names = template, sorted(set(names))
        super().__init__(template.replace("{names}", ", ".join(self.names)))

    def with_names(self, more) -> UnknownDataError:
        """The same error listing ``more`` names too (the tasks layer adds its own)."""
        return UnknownDataError(self.template, set(self.names) | set(more))


def resolve_h5(name_or_path: str) -> Path:
    """The HDF5 file for a data set name or path.

    Raises:
        UnknownDataError: (a FileNotFoundError) unknown name or missing .h5
            path; the message lists the image data set names.
        FileNotFoundError: a known name whose file is missing; the message says
            where it looked and how to build the file.
    """
    # "{names}" stays a literal field (outside the f-strings) for UnknownDataError to fill
    p = Path(name_or_path)
    if p.suffix in (".h5", ".hdf5"):
        if not p.exists():
            raise UnknownDataError(f"data file {p} does not exist; give an existing .h5 file or one of "
                                   "the names {names}", known_names())
        return p
    if name_or_path not in DATASETS:
        raise UnknownDataError(f"unknown data set {name_or_path!r}; known: "
                               "{names}, or a path to an .h5 file", known_names())
    fname, how = DATASETS[name_or_path]
    for d in data_dirs():
        if (d / fname).exists():
            return d / fname
    raise FileNotFoundError(f"data set {name_or_path!r}: {fname} not found in "
                            f"{', '.join(str(d) for d in data_dirs())}; {how}")


@dataclass
class ImageDataset:
    """An image classification data set in memory.

    Attributes:
        train_x, test_x: float32 (N, 1, 28, 28), standardised with the training
            mean and std.
        train_y, test_y: int64 (N,) class indices.
        class_names: list of str.
        name: what the user asked for; path: the file read.
    """
    train_x: np.ndarray
    train_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray
    class_names: list
    name: str
    path: str
    meta: dict = field(default_factory=dict)

    @property
    def num_classes(self) -> int:
        return len(self.class_names)


@contextmanager
def open_h5(path):
    """``h5py.File(path, "r")``, with damage to the file (h5py's OSError,
    RuntimeError or KeyError while opening or reading it) reported as a
    ValueError that names the file and the fix.

    Raises:
        ValueError: the file is truncated or corrupt.
    """
    import h5py

    try:
        with h5py.File(path, "r") as f:
            yield f
    except (OSError, RuntimeError, KeyError) as e:
        raise ValueError(f"data file {path} is corrupt or truncated ({e}); build or copy it again (python -m "
                         "minips data ... --out FILE.h5; the committed mini set: git checkout data/)") from None


def load_image_dataset(name_or_path: str) -> ImageDataset:
    """Load an image data set (Fashion-MNIST layout) by name or path.

    Raises:
        FileNotFoundError: see :func:`resolve_h5`.
        ValueError: the file lacks the train/test groups or they are malformed.
    """
    from .shared import cached

    path = resolve_h5(name_or_path)
    st = os.stat(path)  # virtual ranks share one copy per file version
    return cached(("image-dataset", os.path.realpath(path), st.st_mtime_ns, st.st_size, name_or_path),
                  lambda: _read_image_dataset(name_or_path, path))


def _read_image_dataset(name_or_path: str, path: Path) -> ImageDataset:
    from .loader import normalize_images

    with open_h5(path) as f:
        for split in ("train", "test"):
            if split not in f or "images" not in f[split] or "labels" not in f[split]:
                raise ValueError(f"{path}: no /{split}/images and /{split}/labels; was it written by "
                                 "'python -m minips data fashion-mnist'?")
        tr_i, tr_l = f["train/images"][...], f["train/labels"][...]
        te_i, te_l = f["test/images"][...], f["test/labels"][...]
        names = [n.decode() if isinstance(n, bytes) else str(n) for n in f.attrs.get("class_names", [])]
    for split, (i, lab) in {"train": (tr_i, tr_l), "test": (te_i, te_l)}.items():
        if i.ndim != 3 or len(i) != len(lab):
            raise ValueError(f"{path}: /{split} has images {i.shape} and labels {lab.shape}; "
                             "expected (N, H, W) and (N,)")
    tr_l, te_l, n_classes = check_image_data(path, tr_i, tr_l, te_i, te_l, names)
    scaled = tr_i.astype(np.float32) / 255.0
    mean, std = float(scaled.mean()), float(scaled.std())
    return ImageDataset(
        normalize_images(tr_i, mean, std), tr_l, normalize_images(te_i, mean, std), te_l,
        names or [str(c) for c in range(n_classes)], name_or_path, str(path), {"mean": mean, "std": std})


def _first(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask.reshape(len(mask), -1).any(axis=1) if mask.ndim > 1 else mask)[0])


def check_image_data(path, train_x, train_y, test_x, test_y, names=()) -> tuple:
    """Check an image data set's arrays before anything trains on them (and
    before a run's ``--out`` is touched): each error is one line naming the
    file, the split, the first bad sample and the fix.

    Args:
        path: the file, for the messages.
        train_x, test_x: images (N, H, W), any numeric dtype (uint8 0..255 as written
            by ``python -m minips data``).
        train_y, test_y: labels (N,): class indices, integers (a float dtype
            holding whole numbers is accepted).
        names: the file's class names (``class_names`` attribute), if any: the
            number of classes; else the largest training label + 1.

    Returns:
        (train_y, test_y as int64, number of classes).

    Raises:
        ValueError: a split with no samples; a label that is not a whole
            number (2.5, NaN) or outside 0..C-1; an image pixel that is NaN or
            infinite; training images that are all one value (nothing to learn,
            and standardising would divide by their standard deviation, 0).
    """
    out = []
    for split, x, y in (("train", train_x, train_y), ("test", test_x, test_y)):
        where = f"{path}: /{split}"
        if len(y) == 0:
            raise ValueError(f"{where} holds no samples; a data set needs at least one training and one test "
                             "image (write it again with python -m minips data ...)")
        if not (np.issubdtype(y.dtype, np.integer) or np.issubdtype(y.dtype, np.floating)):
            raise ValueError(f"{where}/labels has dtype {y.dtype}; labels must be class indices 0..C-1 (integers)")
        if np.issubdtype(y.dtype, np.floating):
            whole = np.isfinite(y) & (y == np.round(y))
            if not whole.all():
                i = _first(~whole)
                raise ValueError(f"{where}/labels[{i}] is {float(y[i])!r}: labels must be whole class indices 0..C-1 "
                                 "(a fractional label would be truncated); fix the file's labels")
        if not np.issubdtype(x.dtype, np.number):
            raise ValueError(f"{where}/images has dtype {x.dtype}; images must be numbers (uint8 0..255)")
        if np.issubdtype(x.dtype, np.inexact):
            finite = np.isfinite(x)
            if not finite.all():
                i = _first(~finite)
                raise ValueError(f"{where}/images[{i}] holds a pixel that is NaN or infinite "
                                 f"({int((~finite).sum())} such pixels in /{split}); fix or drop those images")
        out.append(y.astype(np.int64))
    n_classes = len(names) if names else int(out[0].max()) + 1
    for split, y in zip(("train", "test"), out):
        bad = (y < 0) | (y >= n_classes)
        if bad.any():
            i = _first(bad)
            known = f"the file's {n_classes} class_names" if names else f"the training labels' largest, {n_classes - 1}"
            raise ValueError(f"{path}: /{split}/labels[{i}] is {int(y[i])}, outside 0..{n_classes - 1} ({known}); "
                             "labels must be class indices 0..C-1")
    lo, hi = train_x.min(), train_x.max()
    if lo == hi:
        raise ValueError(f"{path}: every training image holds the same value ({lo}) in every pixel: nothing to "
                         "learn, and standardising would divide by their standard deviation, 0; check the file's "
                         "images")
    return out[0], out[1], n_classes
