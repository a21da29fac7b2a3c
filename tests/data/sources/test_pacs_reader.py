"""PACS: tiny image folders per domain and class (JPEG), and the .npz dump form."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedrun.config.registry import build_params
from fedrun.core.errors import ConfigError, DataError
from fedrun.data.sources.pacs import CLASSES, PACSParams, load_pacs


def test_pacs_image_folders(tmp_path: Path) -> None:
    from PIL import Image

    for d, dom in enumerate(("photo", "sketch")):
        for k in (0, 6):
            folder = tmp_path / "PACS" / dom / CLASSES[k]
            folder.mkdir(parents=True)
            for i in range(5):
                Image.fromarray(np.full((40, 50, 3), 40 * d + k, dtype=np.uint8)).save(folder / f"pic_{i}.jpg")
    d = load_pacs(PACSParams(root=str(tmp_path), domains=["photo", "sketch"], resize=24, crop=16, test_fraction=0.2))
    assert d.input_shape == (3, 16, 16) and d.num_classes == 7
    assert len(d.train) == 16 and len(d.test) == 4  # 10 images per domain, 20% held out per domain
    assert np.bincount(d.test.domain.numpy()).tolist() == [2, 2]
    assert set(d.train.y.tolist()) == {0, 6}
    assert d.train.x.shape[1:] == (3, 16, 16)


def test_pacs_npz_dump(tmp_path: Path) -> None:
    (tmp_path / "PACS").mkdir()
    np.savez(tmp_path / "PACS" / "cartoon.npz", x=np.zeros((10, 227, 227, 3), np.uint8), y=np.arange(10) % 7)
    d = load_pacs(PACSParams(root=str(tmp_path), domains=["cartoon"], resize=32, crop=32))
    assert d.train.x.shape == (9, 3, 32, 32) and len(d.test) == 1 and d.domain_names == ["cartoon"]


def test_pacs_errors(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="PACS/photo"):
        load_pacs(PACSParams(root=str(tmp_path)))
    with pytest.raises(ConfigError, match="data.crop"):
        build_params(PACSParams, {"resize": 32, "crop": 64}, "data")
