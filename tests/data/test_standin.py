"""Stand-in data (``data.standin``): a missing dataset's interface, seeded, learnable; unused when files exist."""

from __future__ import annotations

import dataclasses
import gzip
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from fedrun.config.registry import DATASETS, Entry, build_params
from fedrun.core.errors import DataError, DataMissing
from fedrun.data.base import DataParams, Dataset
from fedrun.data.partitions.pachinko import hierarchy
from fedrun.data.sources import mnist
from fedrun.data.standin import image_dataset, with_standin
from tests.conftest import REPO
from tests.data.sources.test_digit5_reader import fedbn_domain
from tests.data.sources.test_emnist_reader import make_emnist
from tests.data.sources.test_shakespeare_reader import write_leaf
from tests.data.test_files import write_cifar, write_mnist

LETTER = np.array([2])


def _pacs_npz(root: Path) -> None:
    (root / "PACS").mkdir(parents=True)
    np.savez(root / "PACS" / "cartoon.npz", x=np.zeros((10, 40, 40, 3), np.uint8), y=np.arange(10) % 7)


def _digit5(root: Path) -> None:
    fedbn_domain(root, "MNIST", (28, 28))
    fedbn_domain(root, "SVHN", (32, 32, 3))


def _leaf(root: Path) -> None:
    write_leaf(root, "train", {"HAMLET_HAMLET": 5, "HAMLET_OPHELIA": 3})
    write_leaf(root, "test", {"HAMLET_HAMLET": 2})


# dataset: (loader parameters, writer of tiny files in the real format under data.root)
REAL: dict[str, tuple[dict[str, Any], Callable[[Path], Any]]] = {
    "mnist": ({"verify": False}, lambda r: write_mnist(r / "mnist")),
    "cifar10": ({"verify": False}, write_cifar),
    "cifar100": ({"verify": False}, lambda r: write_cifar(r, hundred=True)),
    "emnist": ({"split": "letters"}, lambda r: make_emnist(r, "letters", {"train": np.arange(1, 27), "test": LETTER})),
    "digit5": ({"domains": ["mnist", "svhn"]}, _digit5),
    "pacs": ({"domains": ["cartoon"], "resize": 32, "crop": 32}, _pacs_npz),
    "shakespeare": ({"source": "leaf"}, _leaf),  # not the installed package's plays
}


def load(name: str, root: Path, **params: Any) -> Dataset:
    entry = DATASETS.get(name)
    return with_standin(name, entry.obj)(build_params(entry.params, {"root": str(root), **params}, "data"))


def interface(d: Dataset) -> dict[str, Any]:
    """What models and partitions read from a dataset."""
    return {
        "name": d.name,
        "classes": d.num_classes,
        "input_shape": d.input_shape,
        "x": [(s.x.dtype, tuple(s.x.shape[1:])) for s in (d.train, d.test)],
        "y": [s.y.dtype for s in (d.train, d.test)],
        "norm": (d.mean, d.std),
        "domains": (d.domain_names, d.train.domain is not None, d.test.domain is not None),
        "coarse": (d.train.coarse is not None, d.test.coarse is not None),
        "natural": d.natural_clients is not None,
    }


@pytest.mark.parametrize("name", sorted(REAL))
def test_standin_has_the_real_interface_and_is_unused_when_files_exist(name: str, tmp_path: Path) -> None:
    params, write = REAL[name]
    with pytest.raises(DataMissing):  # not asked for: the missing files are still an error
        load(name, tmp_path / "none", **params)
    fake = load(name, tmp_path / "none", standin=True, **params)
    assert fake.standin is not None and "not found" in fake.standin and "standin" in fake.notes
    write(tmp_path / "real")
    real = load(name, tmp_path / "real", standin=True, **params)
    assert real.standin is None and "standin" not in real.notes
    plain = load(name, tmp_path / "real", **params)
    assert torch.equal(real.train.x, plain.train.x) and torch.equal(real.test.y, plain.test.y)
    assert interface(fake) == interface(real)


def test_fmnist_standin_only_without_the_debian_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = load("fmnist", tmp_path, standin=True)
    assert real.standin is None and len(real.train) == 60000  # /usr/share/datasets/fashion-mnist
    monkeypatch.setattr(mnist, "DEBIAN_FMNIST", tmp_path / "none")
    fake = load("fmnist", tmp_path, standin=True)
    assert fake.standin is not None and interface(fake) == interface(real)
    dom = load("fmnist_domains", tmp_path, standin=True, domains=["plain", "invert"])
    assert dom.standin is not None and dom.input_shape == (3, 28, 28) and dom.domain_names == ["plain", "invert"]


def test_a_corrupt_file_is_an_error_even_with_standin(tmp_path: Path) -> None:
    write_mnist(tmp_path / "mnist")
    path = tmp_path / "mnist" / "train-images-idx3-ubyte.gz"
    raw = gzip.decompress(path.read_bytes())
    path.write_bytes(gzip.compress(raw[:-100]))
    with pytest.raises(DataError, match="truncated") as e:
        load("mnist", tmp_path, standin=True, verify=False)
    assert not isinstance(e.value, DataMissing)


def test_standin_is_seeded_balanced_and_keeps_metadata(tmp_path: Path) -> None:
    a = load("pacs", tmp_path, standin=True, crop=32, resize=32)
    b = load("pacs", tmp_path, standin=True, crop=32, resize=32)
    c = load("pacs", tmp_path, standin=True, crop=32, resize=32, seed=1)
    assert torch.equal(a.train.x, b.train.x) and torch.equal(a.train.domain, b.train.domain)
    assert not torch.equal(a.train.x, c.train.x)
    pairs = np.bincount(a.train.domain.numpy() * 7 + a.train.y.numpy(), minlength=4 * 7)
    assert pairs.min() > 0  # every class in every domain (domains partitions with label skew inside)
    big = load("pacs", tmp_path, standin=True)  # 224 px: fewer images, still enough for a smoke run
    assert big.train.x.shape[1:] == (3, 224, 224) and len(big.train) >= 300 and len(big.test) >= 100

    cifar100 = load("cifar100", tmp_path, standin=True)
    counts = np.bincount(cifar100.train.y.numpy(), minlength=100)
    assert counts.min() >= 0.5 * counts.max() > 0
    tree = hierarchy(cifar100.train.y.numpy(), cifar100.train.coarse.numpy())  # Pachinko's superclass tree
    assert len(tree) == 20 and sorted(f for fs in tree.values() for f in fs) == list(range(100))

    emnist = load("emnist", tmp_path, standin=True, source="leaf")
    assert emnist.num_classes == 62 and emnist.mean is None  # as LEAF's FEMNIST: writers, no normalisation
    writers = np.concatenate(emnist.natural_clients)
    assert sorted(writers.tolist()) == list(range(len(emnist.train)))
    assert {"split", "fraction"} <= load("emnist", tmp_path, standin=True).notes.keys()


def test_standin_labels_are_learnable(tmp_path: Path) -> None:
    d = load("cifar10", tmp_path, standin=True)
    x = d.train.x.reshape(len(d.train), -1).float()
    centres = torch.stack([x[d.train.y == k].mean(0) for k in range(10)])
    pred = torch.cdist(d.test.x.reshape(len(d.test), -1).float(), centres).argmin(1)
    assert (pred == d.test.y).float().mean() > 0.9  # nearest class mean

    s = load("shakespeare", tmp_path, standin=True, source="leaf")
    assert s.train.x.dtype == torch.int32 and int(s.train.x.max()) < s.num_classes == 80
    assert sorted(np.concatenate(s.natural_clients).tolist()) == list(range(len(s.train)))
    bigram = np.zeros((80, 80))
    np.add.at(bigram, (s.train.x[:, -1].numpy(), s.train.y.numpy()), 1)
    acc = (bigram.argmax(1)[s.test.x[:, -1].numpy()] == s.test.y.numpy()).mean()
    assert acc > 5 / 80  # the next symbol follows from the last one far better than chance


def test_every_registered_file_source_has_a_standin() -> None:
    without = {name for name in DATASETS.names() if DATASETS.get(name).standin is None}
    assert without == {"synthetic"}  # generated, never missing


def test_a_source_registers_its_standin_beside_its_loader(monkeypatch: pytest.MonkeyPatch) -> None:
    """A source outside fedrun gets a stand-in by registering one: fedrun/data/standin.py names no source."""

    @dataclasses.dataclass
    class ToyParams(DataParams):
        standin: bool = True

    def load_toy(p: ToyParams) -> Dataset:
        raise DataMissing("toy: no files")

    def standin_toy(p: ToyParams, rng: np.random.Generator) -> Dataset:
        return image_dataset("toy", 3, (1, 8, 8), None, None, rng)

    monkeypatch.setitem(DATASETS._entries, "toy", Entry("toy", load_toy, ToyParams, standin_toy))
    d = with_standin("toy", load_toy)(ToyParams())
    assert d.num_classes == 3 and d.input_shape == (1, 8, 8) and d.standin == "toy: no files"
    assert "fedrun.data.sources" not in (REPO / "fedrun" / "data" / "standin.py").read_text()
