"""Moving Fashion-MNIST clips with captions: the grammar, the vocabulary, the
clip generator and the HDF5 data set.

The data of the video-captioning task (the sequence half of the seed paper's
experiments, Wen et al., IJPP 2024), generated in seconds on a laptop:

- **Clips**: T frames (default 10) of a 48x48 canvas on which 1 or 2
  Fashion-MNIST garments move, each in one of 8 directions, bouncing off the
  border (the construction of Moving MNIST, Srivastava, Mansimov &
  Salakhutdinov, ICML 2015). Train clips use training images, test clips test
  images. Deterministic given the seed.
- **Captions** from a small grammar: "a sneaker moves up" or "a sneaker moves
  up and a bag moves down-left". With two garments, they are named from left
  to right as they stand in the first frame (so the caption is a function of
  the clip), and the direction is the one they start with.
- **Vocabulary** (:data:`VOCAB`): the grammar's words plus <pad>, <bos>,
  <eos>, <unk>; captions become int64 token ids of length :data:`CAPTION_LEN`.

:func:`load_dataset` draws 20,000 training and 500 test clips from the
garments of the committed ``data/fashion-mnist-mini.h5`` (a second or two) and
caches the set as HDF5 in ``data/cache/``. A clip is stored as a small table
(which garment, start, velocity); its pixels are rendered when a batch is
taken (:class:`ClipSet`), so the set needs megabytes, not gigabytes.
``python -m minips data moving-fmnist-captions --out FILE.h5`` writes a set
explicitly (:func:`build_dataset` + :func:`write_h5`).

The model is :class:`minips.models.captioner.VideoCaptioner`; the metrics and
the evaluation are in :mod:`minips.tasks.captioning`. This module is part of
the data layer: it imports nothing from minips outside :mod:`minips.data`.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .datasets import resolve_h5

__all__ = ["DATA_NAME", "NOUNS", "DIRECTIONS", "Vocab", "VOCAB", "CAPTION_LEN", "draw_clip", "render_clip",
           "caption_of", "make_clip", "ClipSet", "generate_clips", "CaptionDataset", "DEFAULT_TRAIN_CLIPS",
           "DEFAULT_TEST_CLIPS", "build_dataset", "load_dataset", "write_h5", "read_h5"]

DATA_NAME = "moving-fmnist-captions"
GENERATOR_VERSION = 2  # bump when the generator changes, so stale caches are not reused

# --- the grammar ----------------------------------------------------------------------
#: caption word of each Fashion-MNIST class (T-shirt/top, Trouser, ..., Ankle boot)
NOUNS = ("t-shirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag", "boot")

#: direction word -> (dx, dy) unit step in image coordinates (y grows downwards)
DIRECTIONS = {
    "up": (0, -1), "down": (0, 1), "left": (-1, 0), "right": (1, 0),
    "up-left": (-1, -1), "up-right": (1, -1), "down-left": (-1, 1), "down-right": (1, 1),
}

MAX_OBJECTS = 2
MAX_WORDS = 4 * MAX_OBJECTS + (MAX_OBJECTS - 1)  # "a NOUN moves DIR" joined by "and"


def describe(nouns, directions) -> str:
    """The caption of garments (named left to right) and their directions."""
    return " and ".join(f"a {n} moves {d}" for n, d in zip(nouns, directions))


class Vocab:
    """Words <-> token ids, with the special tokens <pad>=0, <bos>=1, <eos>=2, <unk>=3.

    Args:
        words: the ordinary words (ids 4, 5, ... in this order).

    Text is lower-cased and split on whitespace (the grammar has no
    punctuation); words not in the vocabulary become <unk>.
    """

    SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")
    PAD, BOS, EOS, UNK = 0, 1, 2, 3

    def __init__(self, words):
        self.words = list(self.SPECIALS) + [w for w in words if w not in self.SPECIALS]
        self.index = {w: i for i, w in enumerate(self.words)}
        if len(self.index) != len(self.words):
            raise ValueError("Vocab: words must be distinct")

    def __len__(self) -> int:
        return len(self.words)

    def tokenize(self, text: str) -> list[str]:
        return text.lower().split()

    def encode(self, text: str, length: int | None = None) -> np.ndarray:
        """``<bos> w1 ... wk <eos>`` as int64 ids, padded with <pad> to ``length``.

        Raises:
            ValueError: the caption needs more than ``length`` tokens.
        """
        ids = [self.BOS] + [self.index.get(w, self.UNK) for w in self.tokenize(text)] + [self.EOS]
        if length is None:
            length = len(ids)
        if len(ids) > length:
            raise ValueError(f"caption {text!r} needs {len(ids)} tokens with <bos>/<eos>, more than {length}")
        return np.array(ids + [self.PAD] * (length - len(ids)), dtype=np.int64)

    def decode(self, ids) -> str:
        """The words of ``ids`` up to the first <eos>; <bos> and <pad> are skipped.

        Raises:
            ValueError: an id outside [0, len(vocab)).
        """
        out = []
        for i in np.asarray(ids).tolist():
            if not 0 <= i < len(self.words):
                raise ValueError(f"token id {i} is not in the vocabulary (ids 0..{len(self.words) - 1})")
            if i == self.EOS:
                break
            if i not in (self.BOS, self.PAD):
                out.append(self.words[i])
        return " ".join(out)


#: the vocabulary of the grammar (fixed, so train and test share it): 25 tokens
VOCAB = Vocab(["a", "and", "moves", *NOUNS, *DIRECTIONS])
CAPTION_LEN = MAX_WORDS + 2  # with <bos> and <eos>


# --- the clip generator ---------------------------------------------------------------
# A clip is drawn as a small table (which garment, where it starts, how it
# moves) and rendered to pixels only when needed, so a training set of tens of
# thousands of clips costs a few MB of memory, not a few GB.
DIRECTION_NAMES = tuple(DIRECTIONS)
# Columns of a clip table row, one row per garment; image -1 marks "no garment".
IMAGE, DIRECTION, X0, Y0, VX, VY = range(6)


def _trajectory(start: int, velocity: int, frames: int, limit: int) -> np.ndarray:
    """Positions along one axis over ``frames`` steps, bouncing at 0 and ``limit``."""
    pos = np.empty(frames, np.int64)
    p, v = start, velocity
    for t in range(frames):
        pos[t] = p
        p += v
        if p < 0:               # reflect off the wall: the overshoot comes back
            p, v = -p, -v
        elif p > limit:
            p, v = 2 * limit - p, -v
    return pos


def _start(rng, velocity: int, limit: int) -> int:
    """A start position from which the first step does not bounce, so the
    direction in the caption is the one seen between frames 0 and 1."""
    return int(rng.integers(max(0, -velocity), min(limit, limit - velocity) + 1))


def draw_clip(rng, n_images: int, size: int = 48, side: int = 28) -> np.ndarray:
    """Draw one clip's garments: int64 table (MAX_OBJECTS, 6) with columns
    image index, direction index, x0, y0, vx, vy (pixels, pixels/frame);
    rows sorted left to right by x0; unused rows have image -1.

    1 or 2 garments; speed 2 or 3 pixels per frame along each moving axis;
    two garments start at least 3 pixels apart horizontally, so "left to
    right" is visible in the first frame.
    """
    limit = size - side
    table = np.full((MAX_OBJECTS, 6), -1, np.int64)
    count = int(rng.integers(1, MAX_OBJECTS + 1))
    for row in range(count):
        image = int(rng.integers(n_images))
        direction = int(rng.integers(len(DIRECTION_NAMES)))
        speed = int(rng.integers(2, 4))
        vx, vy = (speed * u for u in DIRECTIONS[DIRECTION_NAMES[direction]])
        x0 = _start(rng, vx, limit)
        while row and abs(x0 - table[0, X0]) < 3:
            x0 = _start(rng, vx, limit)
        table[row] = image, direction, x0, _start(rng, vy, limit), vx, vy
    table[:count] = table[:count][np.argsort(table[:count, X0], kind="stable")]
    return table


def caption_of(table: np.ndarray, labels: np.ndarray) -> str:
    """The caption of a clip table (garments named left to right)."""
    rows = table[table[:, IMAGE] >= 0]
    return describe([NOUNS[int(labels[r[IMAGE]])] for r in rows], [DIRECTION_NAMES[r[DIRECTION]] for r in rows])


def render_clip(table: np.ndarray, images: np.ndarray, frames: int = 10, size: int = 48) -> np.ndarray:
    """Pixels of a clip table: uint8 (T, size, size), garments combined by
    pixelwise maximum (as in Moving MNIST)."""
    side = images.shape[1]
    clip = np.zeros((frames, size, size), np.uint8)
    for image, _, x0, y0, vx, vy in table[table[:, IMAGE] >= 0]:
        xs, ys = _trajectory(x0, vx, frames, size - side), _trajectory(y0, vy, frames, size - side)
        for t in range(frames):
            window = clip[t, ys[t]:ys[t] + side, xs[t]:xs[t] + side]
            np.maximum(window, images[image], out=window)
    return clip


def make_clip(rng, images: np.ndarray, labels: np.ndarray, frames: int = 10, size: int = 48):
    """One clip and its caption: ``(uint8 (T, size, size), str)``.

    Args:
        rng: a ``np.random.Generator`` (the only source of randomness).
        images: uint8 (M, 28, 28) garments; labels: (M,) classes 0..9.
        frames: T; size: canvas side in pixels (larger than a garment).
    """
    table = draw_clip(rng, len(images), size, images.shape[1])
    return render_clip(table, images, frames, size), caption_of(table, labels)


class ClipSet:
    """``n`` clips as an array-like of shape (n, T, 1, size, size), uint8,
    rendered when indexed: ``clips[i]`` is one clip (T, 1, S, S),
    ``clips[index_array]`` or ``clips[a:b]`` a batch (k, T, 1, S, S). This is
    what the batch loader slices.

    Args:
        tables: int (n, MAX_OBJECTS, 6) from :func:`draw_clip`.
        images: uint8 (M, 28, 28), the garments the tables refer to.
        frames, size: T and S.
    """

    dtype = np.dtype(np.uint8)
    ndim = 5

    def __init__(self, tables: np.ndarray, images: np.ndarray, frames: int = 10, size: int = 48):
        self.tables, self.images, self.frames, self.size = tables, images, frames, size
        self.shape = (len(tables), frames, 1, size, size)

    def __len__(self) -> int:
        return len(self.tables)

    def __getitem__(self, index):
        if isinstance(index, (int, np.integer)):
            return render_clip(self.tables[index], self.images, self.frames, self.size)[:, None]
        rows = self.tables[index]
        out = np.empty((len(rows), self.frames, 1, self.size, self.size), np.uint8)
        for k, table in enumerate(rows):
            out[k, :, 0] = render_clip(table, self.images, self.frames, self.size)
        return out

    def __array__(self, dtype=None, copy=None):
        return self[:].astype(dtype or self.dtype, copy=False)


def generate_clips(images, labels, n: int, seed, frames: int = 10, size: int = 48):
    """Draw ``n`` clips with ``np.random.default_rng(seed)``.

    Returns:
        ``(clips, captions)``: a :class:`ClipSet` (rendered on demand) and a
        list of n caption strings.
    """
    rng = np.random.default_rng(seed)
    tables = np.stack([draw_clip(rng, len(images), size, images.shape[1]) for _ in range(n)])
    return ClipSet(tables, images, frames, size), [caption_of(t, labels) for t in tables]


# --- the data set, in memory and as HDF5 ------------------------------------------------------
@dataclass
class CaptionDataset:
    """Clips and captions of both splits.

    Attributes:
        train_clips, test_clips: :class:`ClipSet` (n, T, 1, S, S) uint8.
        train_text, test_text: the captions, lists of str.
        train_ids, test_ids: int64 (n, L) token ids (``<bos> ... <eos> <pad>...``).
        train_labels, test_labels: the garment classes the tables refer to.
        vocab: the :class:`Vocab`.
        meta: how it was made (source, seed, counts, frames, size, version).
    """
    train_clips: ClipSet
    train_labels: np.ndarray
    test_clips: ClipSet
    test_labels: np.ndarray
    vocab: Vocab = field(default_factory=lambda: VOCAB)
    meta: dict = field(default_factory=dict)

    def __post_init__(self):
        self.train_text = [caption_of(t, self.train_labels) for t in self.train_clips.tables]
        self.test_text = [caption_of(t, self.test_labels) for t in self.test_clips.tables]
        self.train_ids = np.stack([self.vocab.encode(c, CAPTION_LEN) for c in self.train_text])
        self.test_ids = np.stack([self.vocab.encode(c, CAPTION_LEN) for c in self.test_text])


def _raw_fashion_mnist(source: str):
    """uint8 images and labels of both splits of an image data set (name or .h5)."""
    from .datasets import open_h5

    path = resolve_h5(source)
    with open_h5(path) as f:
        return (f["train/images"][...], f["train/labels"][...],
                f["test/images"][...], f["test/labels"][...], path)


DEFAULT_TRAIN_CLIPS = 20_000
DEFAULT_TEST_CLIPS = 500


def build_dataset(source: str = "fashion-mnist-mini", n_train: int = DEFAULT_TRAIN_CLIPS,
                  n_test: int = DEFAULT_TEST_CLIPS, seed: int = 0, frames: int = 10,
                  size: int = 48) -> CaptionDataset:
    """Generate a captioning data set from the garments of ``source``.

    Train clips draw from the source's training images with seed
    ``(seed, 0)``, test clips from its test images with ``(seed, 1)`` (so the
    test set does not depend on ``n_train``).

    Raises:
        ValueError: counts < 1, frames < 2, or a canvas not larger than a garment.
        FileNotFoundError: the source data set is missing (see
            :func:`minips.data.resolve_h5`).
    """
    if n_train < 1 or n_test < 1:
        raise ValueError(f"need at least one train and one test clip, got {n_train} and {n_test}")
    if frames < 2:
        raise ValueError(f"clips need at least 2 frames to show motion, got {frames}")
    tr_i, tr_l, te_i, te_l, path = _raw_fashion_mnist(source)
    if size < tr_i.shape[1] + 12:
        raise ValueError(f"the canvas ({size} pixels) must be at least 12 pixels wider than a garment "
                         f"({tr_i.shape[1]}), so garments have room to move")
    train_clips, _ = generate_clips(tr_i, tr_l, n_train, (seed, 0), frames, size)
    test_clips, _ = generate_clips(te_i, te_l, n_test, (seed, 1), frames, size)
    meta = {"source": str(source), "source_file": Path(path).name, "seed": seed, "frames": frames,
            "size": size, "n_train": n_train, "n_test": n_test, "version": GENERATOR_VERSION}
    return CaptionDataset(train_clips, tr_l, test_clips, te_l, VOCAB, meta)


def write_h5(ds: CaptionDataset, out) -> None:
    """Write ``ds`` to ``out`` atomically (temporary file + rename).

    Layout, per split (``/train``, ``/test``): ``images`` uint8 (M, 28, 28)
    and ``labels`` (M,) — the source garments; ``tables`` int16 (n, 2, 6) —
    each clip's garments (image, direction, x0, y0, vx, vy; image -1 = none);
    ``captions`` (n strings, for reading; they follow from the tables).
    Attributes: kind, vocab, frames, size, seed, source, version, licence.
    Pixels are rendered from the tables on reading (:class:`ClipSet`).
    """
    import h5py

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f"{out.name}.{os.getpid()}.tmp")
    with h5py.File(tmp, "w") as f:
        for split, clips, labels, text in (("train", ds.train_clips, ds.train_labels, ds.train_text),
                                           ("test", ds.test_clips, ds.test_labels, ds.test_text)):
            g = f.create_group(split)
            g.create_dataset("images", data=clips.images, compression="gzip", compression_opts=4)
            g.create_dataset("labels", data=labels)
            g.create_dataset("tables", data=clips.tables.astype(np.int16), compression="gzip")
            g.create_dataset("captions", data=np.array(text, dtype=object), dtype=h5py.string_dtype())
        f.attrs["kind"] = DATA_NAME
        f.attrs["vocab"] = np.array(ds.vocab.words, dtype=object).astype("S")
        for k, v in ds.meta.items():
            f.attrs[k] = v
        f.attrs["license"] = "MIT (Fashion-MNIST images, Xiao, Rasul & Vollgraf 2017)"
    os.replace(tmp, out)


def read_h5(path) -> CaptionDataset:
    """Read a data set written by :func:`write_h5`.

    Raises:
        ValueError: the file is not a moving-fmnist-captions set, or its
            vocabulary or generator version differ from this version of minips.
    """
    from .datasets import open_h5

    with open_h5(path) as f:
        if f.attrs.get("kind") != DATA_NAME:
            raise ValueError(f"{path} is not a {DATA_NAME} file (attribute kind={f.attrs.get('kind')!r}); "
                             f"write one with 'python -m minips data {DATA_NAME} --out FILE.h5'")
        words = [w.decode() for w in f.attrs["vocab"]]
        if words != VOCAB.words or f.attrs.get("version") != GENERATOR_VERSION:
            raise ValueError(f"{path} was made by another version of the generator; rebuild it")
        meta = {k: (v.item() if hasattr(v, "item") else v) for k, v in f.attrs.items()
                if k not in ("kind", "vocab", "license")}
        frames, size = int(meta["frames"]), int(meta["size"])
        splits = {s: (ClipSet(f[f"{s}/tables"][...].astype(np.int64), f[f"{s}/images"][...], frames, size),
                      f[f"{s}/labels"][...]) for s in ("train", "test")}
    return CaptionDataset(*splits["train"], *splits["test"], VOCAB, meta)


def _cache_path(source: str, n_train: int, n_test: int, seed: int, frames: int) -> Path:
    src = resolve_h5(source)
    return src.parent / "cache" / (f"{DATA_NAME}_{src.stem}_{n_train}-{n_test}_T{frames}_seed{seed}"
                                   f"_v{GENERATOR_VERSION}.h5")


def load_dataset(source: str = "fashion-mnist-mini", n_train: int = DEFAULT_TRAIN_CLIPS,
                 n_test: int = DEFAULT_TEST_CLIPS, seed: int = 0, frames: int = 10) -> CaptionDataset:
    """The data set for these settings: read from the HDF5 cache next to the
    source (``data/cache/``) if there, else generated and cached (when that
    directory is writable; several MPI ranks writing at once is safe: each
    writes a private temporary file and renames it)."""
    path = _cache_path(source, n_train, n_test, seed, frames)
    if path.exists():
        try:
            return read_h5(path)
        except (OSError, ValueError, KeyError):
            pass  # a damaged or outdated cache: make it again
    ds = build_dataset(source, n_train, n_test, seed, frames)
    try:
        write_h5(ds, path)
    except OSError:
        pass  # read-only checkout: keep it in memory only
    return ds
