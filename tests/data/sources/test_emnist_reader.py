"""EMNIST: tiny IDX files written in NIST's format (gzip, big-endian header, transposed images)."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest

from fedrun.core.errors import DataError
from fedrun.data.sources.emnist import EMNISTParams, load_emnist


def write_idx(path: Path, arr: np.ndarray) -> None:
    header = struct.pack(">BBBB", 0, 0, 0x08, arr.ndim) + b"".join(struct.pack(">I", d) for d in arr.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + arr.astype(np.uint8).tobytes())


def make_emnist(root: Path, split: str, labels: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    d = root / "emnist" / "gzip"
    d.mkdir(parents=True)
    images = {}
    for part, y in labels.items():
        img = np.zeros((len(y), 28, 28), dtype=np.uint8)
        img[:, 2, 5] = 255  # row 2, column 5 of the upright image
        images[part] = img
        write_idx(d / f"emnist-{split}-{part}-images-idx3-ubyte.gz", img.transpose(0, 2, 1))  # stored transposed
        write_idx(d / f"emnist-{split}-{part}-labels-idx1-ubyte.gz", y)
    return images


def test_emnist_letters_parse_transpose_and_labels(tmp_path: Path) -> None:
    make_emnist(tmp_path, "letters", {"train": np.array([1, 26, 5, 3]), "test": np.array([2, 2])})
    d = load_emnist(EMNISTParams(root=str(tmp_path), split="letters"))
    assert d.num_classes == 26 and d.input_shape == (1, 28, 28)
    assert d.train.y.tolist() == [0, 25, 4, 2] and d.test.y.tolist() == [1, 1]
    assert d.train.x.shape == (4, 1, 28, 28)
    assert (d.train.x[:, 0, 2, 5] == 255).all() and int(d.train.x.sum()) == 4 * 255  # transposed back


def test_emnist_fraction_subset(tmp_path: Path) -> None:
    make_emnist(tmp_path, "byclass", {"train": np.arange(100) % 62, "test": np.arange(50) % 62})
    d = load_emnist(EMNISTParams(root=str(tmp_path), fraction=0.2))
    assert len(d.train) == 20 and len(d.test) == 10 and d.num_classes == 62


def test_emnist_missing_files(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="emnist-balanced-train-images-idx3-ubyte.*gzip.zip"):
        load_emnist(EMNISTParams(root=str(tmp_path), split="balanced"))


def test_femnist_leaf_writers_are_natural_clients(tmp_path: Path) -> None:
    import json

    for split, writers in (("train", {"f0001_01": 3, "f0002_02": 2, "f0003_03": 4}), ("test", {"f0001_01": 1})):
        d = tmp_path / "femnist" / "data" / split
        d.mkdir(parents=True)
        data = {w: {"x": [[1.0] * 783 + [0.0]] * n, "y": [61] * n} for w, n in writers.items()}
        blob = {"users": list(writers), "num_samples": list(writers.values()), "user_data": data}
        (d / "all_data_0.json").write_text(json.dumps(blob))
    d = load_emnist(EMNISTParams(root=str(tmp_path), source="leaf"))
    assert d.num_classes == 62 and [len(c) for c in d.natural_clients] == [3, 2, 4]
    assert d.train.x.shape == (9, 1, 28, 28) and int(d.train.x[0, 0, 0, 0]) == 255 and int(d.train.x[0, 0, 27, 27]) == 0
    assert len(d.test) == 1
    sub = load_emnist(EMNISTParams(root=str(tmp_path), source="leaf", fraction=0.34))
    assert len(sub.natural_clients) == 1
