"""EMNIST (Cohen et al. 2017) from NIST's IDX files (``emnist-<split>-{train,test}-{images-idx3,labels-idx1}-ubyte``
[.gz], as in the ``gzip.zip`` distribution), with FedSAM's subset fraction.

The IDX images are stored transposed (column-major) and are transposed back here. ``letters`` labels are
1-26 in the files and 0-25 here. FedSAM's EMNIST is ByClass (62 classes) with a "20%" subset
(``fraction: 0.2``, the paper's default); its table's 81,425 samples equal 10% of ByClass's 814,255, so
``fraction: 0.1`` reproduces that count. The fraction is a seeded random subset of each split.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from fedrun.data.base import DataParams, Dataset, Split
from fedrun.data.sources.files import load_idx_split
from fedrun.errors import ConfigError, DataError
from fedrun.registry import DATASETS, in_range

CLASSES = {"byclass": 62, "bymerge": 47, "balanced": 47, "letters": 26, "digits": 10, "mnist": 10}
HINT = (
    "download gzip.zip from https://www.nist.gov/itl/products-and-services/emnist-dataset and extract its "
    "emnist-*-ubyte.gz files to {root}/emnist/gzip"
)


@dataclass
class EMNISTParams(DataParams):
    """``data=emnist``: ``split`` (byclass, bymerge, balanced, letters, digits, mnist) and the subset ``fraction``."""

    split: str = "byclass"
    fraction: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.split not in CLASSES:
            raise ConfigError("split", f"invalid value {self.split!r}; valid: {', '.join(CLASSES)}")
        in_range("fraction", self.fraction, 0.0, 1.0, lo_open=True)


def _subset(x: np.ndarray, y: np.ndarray, fraction: float, rng: np.random.Generator) -> Split:
    if fraction < 1.0:
        keep = np.sort(rng.choice(len(y), max(1, int(round(fraction * len(y)))), replace=False))
        x, y = x[keep], y[keep]
    return Split(torch.from_numpy(np.ascontiguousarray(x)).unsqueeze(1), torch.from_numpy(y))


@DATASETS.register("emnist", EMNISTParams)
def load_emnist(p: EMNISTParams) -> Dataset:
    """EMNIST ``split`` (28x28 grey), optionally a random ``fraction`` of it."""
    if p.download:
        raise DataError("emnist: no automatic download (a 560 MB zip); " + HINT.format(root=p.root))
    root = Path(p.root)
    dirs = [root / "emnist" / "gzip", root / "emnist", root / "EMNIST" / "raw", root / "gzip", root]
    stem = f"emnist-{p.split}"
    files = {
        "train_x": (f"{stem}-train-images-idx3-ubyte", None),
        "train_y": (f"{stem}-train-labels-idx1-ubyte", None),
        "test_x": (f"{stem}-test-images-idx3-ubyte", None),
        "test_y": (f"{stem}-test-labels-idx1-ubyte", None),
    }
    a = load_idx_split("emnist", dirs, files, None, root, False, HINT.format(root=root))
    rng = np.random.default_rng(p.seed)
    splits = []
    for part in ("train", "test"):
        x, y = a[f"{part}_x"].transpose(0, 2, 1), a[f"{part}_y"].astype(np.int64)
        if len(x) != len(y):
            raise DataError(f"emnist {p.split} {part}: {len(x)} images but {len(y)} labels")
        if p.split == "letters":
            y = y - 1
        if len(y) and (y.min() < 0 or y.max() >= CLASSES[p.split]):
            raise DataError(f"emnist {p.split} {part}: labels outside 0..{CLASSES[p.split] - 1}; wrong split files?")
        splits.append(_subset(x, y, p.fraction, rng))
    return Dataset(
        name="emnist",
        train=splits[0],
        test=splits[1],
        num_classes=CLASSES[p.split],
        input_shape=(1, 28, 28),
        mean=(0.1736,),
        std=(0.3317,),
        notes={"split": p.split, "fraction": str(p.fraction)},
    )
