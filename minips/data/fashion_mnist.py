"""Fashion-MNIST: read the IDX files, write one HDF5 file, make a stratified subset.

Fashion-MNIST (Xiao, Rasul & Vollgraf, 2017, arXiv:1708.07747; MIT licence):
70,000 28x28 grey images of 10 kinds of garment, 60,000 train and 10,000 test.
It ships as four IDX files (gzipped or not); Debian's ``dataset-fashion-mnist``
package installs them in ``/usr/share/datasets/fashion-mnist``.

IDX format (LeCun's MNIST page): big-endian; a 4-byte magic ``0x00 0x00 <type>
<ndim>`` (type 0x08 = unsigned byte), then ``ndim`` 4-byte sizes, then the data.
Images have magic 2051 (ndim 3), labels 2049 (ndim 1).

HDF5 layout written here::

    /train/images  uint8 (N, 28, 28)     /train/labels  uint8 (N,)
    /test/images   uint8 (M, 28, 28)     /test/labels   uint8 (M,)
    attrs: class_names (10 strings), source, license, description
"""
from __future__ import annotations

import gzip
import os
import struct
from pathlib import Path

import numpy as np

__all__ = ["CLASS_NAMES", "IDXError", "read_idx", "find_idx_files", "convert", "write_h5",
           "stratified_subset"]

CLASS_NAMES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
               "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]

FILES = {
    ("train", "images"): "train-images-idx3-ubyte",
    ("train", "labels"): "train-labels-idx1-ubyte",
    ("test", "images"): "t10k-images-idx3-ubyte",
    ("test", "labels"): "t10k-labels-idx1-ubyte",
}
EXPECTED_COUNT = {"train": 60000, "test": 10000}
MAGIC = {"images": 2051, "labels": 2049}


class IDXError(ValueError):
    """An IDX file is missing, of the wrong kind, or truncated."""


def _open(path: Path):
    with open(path, "rb") as f:
        head = f.read(2)
    return gzip.open(path, "rb") if head == b"\x1f\x8b" else open(path, "rb")


def read_idx(path, kind: str) -> np.ndarray:
    """Read one IDX file (gzipped or not) into a uint8 array.

    Args:
        path: the file.
        kind: ``"images"`` (expects magic 2051, shape (N, 28, 28)) or
            ``"labels"`` (magic 2049, shape (N,), values 0..9).

    Returns:
        uint8 array of shape (N, 28, 28) or (N,).

    Raises:
        IDXError: wrong magic number (names what the file looks like),
            truncated data (says how many bytes are missing), bad image size,
            labels out of range, or a corrupt gzip stream.
    """
    path = Path(path)
    try:
        with _open(path) as f:
            raw = f.read()
    except (OSError, EOFError) as e:
        raise IDXError(f"{path}: cannot read ({e}); is the download complete?") from None
    if len(raw) < 8:
        raise IDXError(f"{path}: only {len(raw)} bytes, too short for an IDX header")
    magic, = struct.unpack(">I", raw[:4])
    expected = MAGIC[kind]
    if magic != expected:
        other = {v: k for k, v in MAGIC.items()}.get(magic)
        hint = (f"it is an IDX {other} file; did you swap images and labels?" if other
                else "it is not an IDX file (or is compressed in a format other than gzip)")
        raise IDXError(f"{path}: magic number {magic}, expected {expected} for {kind}; {hint}")
    ndim = raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise IDXError(f"{path}: truncated header")
    dims = struct.unpack(f">{ndim}I", raw[4:header])
    need = int(np.prod(dims))
    have = len(raw) - header
    if have < need:
        raise IDXError(f"{path}: truncated: header promises {dims} = {need} bytes of data, "
                       f"file has {have} ({need - have} missing); download it again")
    if have > need:
        raise IDXError(f"{path}: {have - need} bytes of trailing data after {dims}; the file is corrupt")
    arr = np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(dims)
    if kind == "images" and dims[1:] != (28, 28):
        raise IDXError(f"{path}: images are {dims[1:]}, Fashion-MNIST images are (28, 28)")
    if kind == "labels" and arr.size and arr.max() > 9:
        raise IDXError(f"{path}: label {arr.max()} found; Fashion-MNIST labels are 0..9")
    return arr.copy()


def find_idx_files(directory) -> dict:
    """Map ``(split, kind)`` to the IDX file in ``directory`` (``name`` or ``name.gz``).

    Raises:
        FileNotFoundError: a file is missing; the message lists what was looked for
            and how to get it (``apt-get install dataset-fashion-mnist``).
    """
    d = Path(directory)
    if not d.is_dir():
        raise FileNotFoundError(f"{d} is not a directory. Install Debian's dataset-fashion-mnist "
                                "(files in /usr/share/datasets/fashion-mnist) or download the four "
                                "IDX files from github.com/zalandoresearch/fashion-mnist")
    found, missing = {}, []
    for key, name in FILES.items():
        for cand in (d / name, d / (name + ".gz")):
            if cand.exists():
                found[key] = cand
                break
        else:
            missing.append(name + "[.gz]")
    if missing:
        raise FileNotFoundError(f"{d}: missing {', '.join(missing)}; expected the four Fashion-MNIST "
                                "IDX files (apt-get install dataset-fashion-mnist puts them in "
                                "/usr/share/datasets/fashion-mnist)")
    return found


def stratified_subset(labels: np.ndarray, n: int, seed: int = 0) -> np.ndarray:
    """Sorted indices of ``n`` samples with every class in proportion.

    Each class c gets ``round(n * count_c / total)`` samples (remainders go to
    the largest fractional parts), drawn without replacement by a generator
    seeded with ``seed``.

    Raises:
        ValueError: ``n`` is larger than the number of samples or < 1.
    """
    labels = np.asarray(labels)
    if not 1 <= n <= len(labels):
        raise ValueError(f"subset size {n} must be between 1 and {len(labels)}")
    rng = np.random.default_rng(seed)
    classes, counts = np.unique(labels, return_counts=True)
    quota = n * counts / counts.sum()
    take = np.floor(quota).astype(int)
    short = n - take.sum()
    take[np.argsort(-(quota - take), kind="stable")[:short]] += 1
    idx = [rng.choice(np.flatnonzero(labels == c), size=k, replace=False) for c, k in zip(classes, take)]
    return np.sort(np.concatenate(idx))


def write_h5(out, splits: dict, attrs: dict) -> None:
    """Write ``{split: (images, labels)}`` to ``out`` atomically (temp file + rename)."""
    import h5py

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    with h5py.File(tmp, "w") as f:
        for split, (images, labels) in splits.items():
            g = f.create_group(split)
            g.create_dataset("images", data=images, compression="gzip", compression_opts=6,
                             chunks=(min(1024, len(images)), 28, 28))
            g.create_dataset("labels", data=labels)
        for k, v in attrs.items():
            f.attrs[k] = v
    os.replace(tmp, out)


def convert(src_dir, out, train_subset: int | None = None, test_subset: int | None = None,
            seed: int = 0) -> dict:
    """Convert the four IDX files in ``src_dir`` to one HDF5 file ``out``.

    Args:
        src_dir: directory with the IDX files (gzipped or not).
        out: the .h5 file to write (atomically).
        train_subset, test_subset: if given, keep a stratified subset of that
            many images (see :func:`stratified_subset`).
        seed: seed of the subset choice.

    Returns:
        ``{split: number of images}`` written.

    Raises:
        FileNotFoundError, IDXError: see :func:`find_idx_files`, :func:`read_idx`;
        IDXError also when image and label counts differ or are not 60,000/10,000.
    """
    files = find_idx_files(src_dir)
    splits, counts = {}, {}
    for split in ("train", "test"):
        images = read_idx(files[(split, "images")], "images")
        labels = read_idx(files[(split, "labels")], "labels")
        if len(images) != len(labels):
            raise IDXError(f"{split}: {len(images)} images but {len(labels)} labels; "
                           "the files are from different releases")
        if len(images) != EXPECTED_COUNT[split]:
            raise IDXError(f"{split}: {len(images)} images, Fashion-MNIST has {EXPECTED_COUNT[split]}; "
                           "is this the right data set?")
        k = train_subset if split == "train" else test_subset
        if k is not None:
            idx = stratified_subset(labels, k, seed=seed + (split == "test"))
            images, labels = images[idx], labels[idx]
        splits[split] = (images, labels)
        counts[split] = len(images)
    desc = "Fashion-MNIST" + (f", stratified subset (seed {seed})" if train_subset or test_subset else "")
    write_h5(out, splits, {
        "class_names": np.array(CLASS_NAMES, dtype=object).astype("S"),
        "source": "Fashion-MNIST, Xiao, Rasul & Vollgraf 2017, github.com/zalandoresearch/fashion-mnist",
        "license": "MIT",
        "description": desc,
    })
    return counts
