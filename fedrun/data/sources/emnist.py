"""EMNIST (Cohen et al. 2017) from NIST's IDX files (``emnist-<split>-{train,test}-{images-idx3,labels-idx1}-ubyte``
[.gz], as in the ``gzip.zip`` distribution), with FedSAM's subset fraction.

The IDX images are stored transposed (column-major) and are transposed back here. ``letters`` labels are
1-26 in the files and 0-25 here. FedSAM's EMNIST is ByClass (62 classes) with a "20%" subset
(``fraction: 0.2``, the paper's default); its table's 81,425 samples equal 10% of ByClass's 814,255, so
``fraction: 0.1`` reproduces that count. The fraction is a seeded random subset of each split.

``source: leaf`` reads LEAF's FEMNIST json instead (``<root>/femnist/data/{train,test}/*.json``: per writer,
``x`` = 784 floats in [0, 1] as LEAF writes them, ``y`` = ByClass label 0-61); the writers become the
natural clients (``partition=natural``). ``fraction`` then keeps a random subset of the writers.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from fedrun.config.registry import DATASETS, DataSignature, in_range
from fedrun.core.errors import ConfigError, DataError, DataMissing
from fedrun.data.base import DataParams, Dataset, Split
from fedrun.data.sources.files import check_labels, load_idx_split
from fedrun.data.sources.leaf import read_leaf_files
from fedrun.data.standin import balanced, image_dataset, signature

MEAN, STD = (0.1736,), (0.3317,)
CLASSES = {"byclass": 62, "bymerge": 47, "balanced": 47, "letters": 26, "digits": 10, "mnist": 10}
HINT = (
    "put the four IDX files of the split (emnist-{split}-train-images-idx3-ubyte.gz, -train-labels-idx1-ubyte.gz,"
    " -test-images-idx3-ubyte.gz, -test-labels-idx1-ubyte.gz) in {root}/emnist/gzip/ (download gzip.zip from"
    " https://www.nist.gov/itl/products-and-services/emnist-dataset and extract them there); data.download=true"
    " cannot fetch EMNIST (no automatic download of the 560 MB zip)"
)
LEAF_HINT = (
    "put LEAF's FEMNIST json in {root}/femnist/data/train/ and {root}/femnist/data/test/ (run LEAF's"
    " data/femnist/preprocess.sh, github.com/TalwalkarLab/leaf, and copy its data/train and data/test there);"
    " data.download=true cannot fetch FEMNIST (no automatic download)"
)


@dataclass
class EMNISTParams(DataParams):
    """``data=emnist``: ``split`` (byclass, bymerge, balanced, letters, digits, mnist) and the subset ``fraction``."""

    split: str = "byclass"  # byclass (62 classes, FedSAM) | bymerge | balanced | letters | digits | mnist
    fraction: float = 1.0  # a seeded random subset of each split (FedSAM's "20%": 0.2; its table's count: 0.1)
    seed: int = 0  # draws the fraction's subset
    # nist: the IDX files under <root>/emnist/gzip | leaf: LEAF's FEMNIST json (<root>/femnist/data), writers are
    # the natural clients
    source: str = "nist"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.split not in CLASSES:
            raise ConfigError("split", f"invalid value {self.split!r}; valid: {', '.join(CLASSES)}")
        in_range("fraction", self.fraction, 0.0, 1.0, lo_open=True)
        if self.source not in ("nist", "leaf"):
            raise ConfigError("source", f"invalid value {self.source!r}; valid: nist, leaf")
        if self.source == "leaf" and self.split != "byclass":
            raise ConfigError("split", "LEAF's FEMNIST has the ByClass labels only; use split=byclass with source=leaf")


def _subset(x: np.ndarray, y: np.ndarray, fraction: float, rng: np.random.Generator) -> Split:
    if fraction < 1.0:
        keep = np.sort(rng.choice(len(y), max(1, int(round(fraction * len(y)))), replace=False))
        x, y = x[keep], y[keep]
    return Split(torch.from_numpy(np.ascontiguousarray(x)).unsqueeze(1), torch.from_numpy(y))


STANDIN_WRITERS = 100  # the stand-in's natural clients with source=leaf (FEMNIST writers)


def standin_emnist(p: EMNISTParams, rng: np.random.Generator) -> Dataset:
    if p.source == "leaf":
        d = image_dataset("emnist", 62, (1, 28, 28), None, None, rng)
        writer = balanced(len(d.train), STANDIN_WRITERS, rng)
        d.natural_clients = [np.flatnonzero(writer == k) for k in range(STANDIN_WRITERS)]
        d.notes = {"source": "leaf", "writers": str(STANDIN_WRITERS)}
        return d
    d = image_dataset("emnist", CLASSES[p.split], (1, 28, 28), MEAN, STD, rng)
    d.notes = {"split": p.split, "fraction": str(p.fraction)}
    return d


def signature_emnist(p: EMNISTParams) -> DataSignature:
    return signature("emnist", 62 if p.source == "leaf" else CLASSES[p.split], (1, 28, 28), p)


@DATASETS.register("emnist", EMNISTParams, standin=standin_emnist, signature=signature_emnist)
def load_emnist(p: EMNISTParams) -> Dataset:
    """EMNIST ``split`` (28x28 grey), optionally a random ``fraction`` of it; writers with ``source=leaf``."""
    if p.source == "leaf":
        return load_femnist(p)
    if p.download:
        raise DataError("emnist: no automatic download (a 560 MB zip); " + HINT.format(root=p.root, split=p.split))
    root = Path(p.root)
    dirs = [root / "emnist" / "gzip", root / "emnist", root / "EMNIST" / "raw", root / "gzip", root]
    stem = f"emnist-{p.split}"
    files = {
        "train_x": (f"{stem}-train-images-idx3-ubyte", None),
        "train_y": (f"{stem}-train-labels-idx1-ubyte", None),
        "test_x": (f"{stem}-test-images-idx3-ubyte", None),
        "test_y": (f"{stem}-test-labels-idx1-ubyte", None),
    }
    lo = 1 if p.split == "letters" else 0  # letters are 1-26 in the files
    labels = (lo, lo + CLASSES[p.split])
    hint = HINT.format(root=root, split=p.split)
    a = load_idx_split("emnist", dirs, files, None, root, False, hint, labels=labels)
    rng = np.random.default_rng(p.seed)
    splits = []
    for part in ("train", "test"):
        x, y = a[f"{part}_x"].transpose(0, 2, 1), a[f"{part}_y"].astype(np.int64)
        if len(x) != len(y):
            raise DataError(f"emnist {p.split} {part}: {len(x)} images but {len(y)} labels")
        y = y - lo  # each file's label range is checked (and named) by load_idx_split
        splits.append(_subset(x, y, p.fraction, rng))
    return Dataset(
        name="emnist",
        train=splits[0],
        test=splits[1],
        num_classes=CLASSES[p.split],
        input_shape=(1, 28, 28),
        mean=MEAN,
        std=STD,
        notes={"split": p.split, "fraction": str(p.fraction)},
    )


def _leaf_images(rows: list, name: str) -> np.ndarray:
    try:
        x = np.asarray(rows, dtype=np.float32)
    except ValueError:  # ragged rows
        raise DataError(f"{name}: FEMNIST rows of different lengths; each must hold 784 pixel values") from None
    if x.ndim != 2 or x.shape[1] != 784:
        raise DataError(f"{name}: FEMNIST rows must hold 784 pixel values, got shape {list(x.shape)}")
    return np.clip(np.rint(x * 255.0), 0, 255).astype(np.uint8).reshape(-1, 1, 28, 28)


def _leaf_labels(y: list, name: str) -> np.ndarray:
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in y):
        raise DataError(f"{name}: FEMNIST labels must be integers 0-61")
    out = np.asarray(y, dtype=np.int64)
    check_labels(Path(name), out, 0, 62)
    return out


def load_femnist(p: EMNISTParams) -> Dataset:
    """LEAF FEMNIST: one natural client per writer (see the module docstring)."""
    root = Path(p.root)
    base = next((d for d in (root / "femnist" / "data", root / "femnist") if (d / "train").is_dir()), None)
    if base is None or not (base / "test").is_dir():
        raise DataMissing(
            f"emnist (source=leaf): femnist/data/train/ and test/ not found under data.root={root}; "
            + LEAF_HINT.format(root=root)
        )
    train = read_leaf_files(base / "train")
    test = read_leaf_files(base / "test")
    rng = np.random.default_rng(p.seed)
    if p.fraction < 1.0:
        keep = np.sort(rng.choice(len(train), max(1, int(round(p.fraction * len(train)))), replace=False))
        writers = {train[i].user for i in keep}
        train = [train[i] for i in keep]
        test = [t for t in test if t.user in writers]
    where = lambda u: f"{u.file} (writer {u.user})"  # noqa: E731
    xs = [_leaf_images(u.x, where(u)) for u in train]
    ys = [_leaf_labels(u.y, where(u)) for u in train]
    starts = np.concatenate([[0], np.cumsum([len(y) for y in ys])])
    natural = [np.arange(starts[i], starts[i + 1]) for i in range(len(ys))]
    tx = [_leaf_images(u.x, where(u)) for u in test] or [np.zeros((0, 1, 28, 28), np.uint8)]
    ty = [_leaf_labels(u.y, where(u)) for u in test] or [np.zeros(0, np.int64)]
    cat = lambda a: torch.from_numpy(np.concatenate(a))  # noqa: E731
    return Dataset(
        name="emnist",
        train=Split(cat(xs), cat(ys)),
        test=Split(cat(tx), cat(ty)),
        num_classes=62,
        input_shape=(1, 28, 28),
        natural_clients=natural,
        notes={"source": "leaf", "writers": str(len(natural))},
    )
