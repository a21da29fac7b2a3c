"""Digit-Five: FedBN's pickled (images, labels) dumps, .npz dumps and image folders, written tiny by the test."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from fedrun.core.errors import DataError
from fedrun.data.sources.digit5 import Digit5Params, load_digit5


def fedbn_domain(root: Path, folder: str, shape: tuple[int, ...], n_parts: int = 2) -> None:
    d = root / "digit_dataset" / folder / "partitions"
    d.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for i in range(n_parts):
        x = rng.integers(0, 256, (4, *shape), dtype=np.uint8)
        (d / f"train_part{i}.pkl").write_bytes(pickle.dumps((x, np.arange(4) + i), protocol=4))
    x = rng.integers(0, 256, (3, *shape), dtype=np.uint8)
    (d.parent / "test.pkl").write_bytes(pickle.dumps((x, np.array([7, 8, 9])), protocol=5))


def test_digit5_fedbn_dumps_with_domain_ids(tmp_path: Path) -> None:
    fedbn_domain(tmp_path, "MNIST", (28, 28))  # grey
    fedbn_domain(tmp_path, "SVHN", (32, 32, 3))  # RGB, resized to 28
    d = load_digit5(Digit5Params(root=str(tmp_path), domains=["mnist", "svhn"]))
    assert d.input_shape == (3, 28, 28) and d.domain_names == ["mnist", "svhn"]
    assert d.train.x.shape == (16, 3, 28, 28) and d.test.x.shape == (6, 3, 28, 28)
    assert d.train.domain.tolist() == [0] * 8 + [1] * 8
    assert d.test.y.tolist() == [7, 8, 9, 7, 8, 9]
    assert (d.train.x[:8, 0] == d.train.x[:8, 2]).all()  # grey repeated to 3 channels


def test_digit5_npz_and_folders(tmp_path: Path) -> None:
    from PIL import Image

    (tmp_path / "digit5").mkdir()
    x = np.zeros((5, 28, 28, 3), dtype=np.uint8)
    np.savez(tmp_path / "digit5" / "usps.npz", x_train=x, y_train=np.arange(5), x_test=x[:2], y_test=np.arange(2))
    for split, n in (("train", 2), ("test", 1)):
        folder = tmp_path / "digit5" / "mnistm" / split / "3"
        folder.mkdir(parents=True)
        for i in range(n):
            Image.fromarray(np.full((32, 32, 3), 200, dtype=np.uint8)).save(folder / f"{i}.png")
    d = load_digit5(Digit5Params(root=str(tmp_path), domains=["usps", "mnistm"]))
    assert len(d.train) == 7 and len(d.test) == 3
    assert d.train.y[-2:].tolist() == [3, 3] and d.train.domain[-2:].tolist() == [1, 1]
    assert int(d.train.x[-1].float().mean().round()) == 200


def test_digit5_missing_domain(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="FedBN"):
        load_digit5(Digit5Params(root=str(tmp_path)))


def test_digit5_refuses_code_in_pickles(tmp_path: Path) -> None:
    d = tmp_path / "digit_dataset" / "MNIST" / "partitions"
    d.mkdir(parents=True)
    (d / "train_part0.pkl").write_bytes(pickle.dumps((Path("x"), [1])))
    (d.parent / "test.pkl").write_bytes(pickle.dumps((np.zeros((1, 28, 28), np.uint8), np.zeros(1))))
    with pytest.raises(DataError, match="refusing"):
        load_digit5(Digit5Params(root=str(tmp_path), domains=["mnist"]))
