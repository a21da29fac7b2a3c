"""CIFAR-10 and CIFAR-100 from the python pickles (``cifar-10-batches-py``, ``cifar-100-python``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from fedrun.config.registry import DATASETS
from fedrun.core.errors import DataError, DataMissing
from fedrun.data.base import DataParams, Dataset, Split
from fedrun.data.sources.files import (
    CIFAR_MD5,
    check_labels,
    check_md5,
    download,
    extract_tar,
    read_bytes,
    safe_unpickle,
)
from fedrun.data.standin import image_dataset, signature

_URLS = {
    "cifar10": ("https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz", "c58f30108f718f92721af3b95e74349a"),
    "cifar100": ("https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz", "eb9058c3a382ffc7106e4002c42a8d85"),
}
MEAN = {"cifar10": (0.4914, 0.4822, 0.4465), "cifar100": (0.5071, 0.4865, 0.4409)}
STD = {"cifar10": (0.2470, 0.2435, 0.2616), "cifar100": (0.2673, 0.2564, 0.2762)}
FILES = {"cifar10": "data_batch_1 ... data_batch_5, test_batch, batches.meta", "cifar100": "train, test, meta"}


@dataclass
class CIFARParams(DataParams):
    """``data=cifar10`` / ``data=cifar100``."""


def _locate(name: str, p: CIFARParams) -> Path:
    root = Path(p.root)
    folder = "cifar-10-batches-py" if name == "cifar10" else "cifar-100-python"
    for d in (root / folder, root / name / folder, root / name.upper() / folder):
        if d.is_dir():
            return d
    if p.download:
        url, digest = _URLS[name]
        archive = root / url.rsplit("/", 1)[1]
        if not archive.is_file():
            download(url, archive, digest)
        extract_tar(archive, root)
        return root / folder
    looked = ", ".join(str(d) for d in (root / folder, root / name / folder, root / name.upper() / folder))
    raise DataMissing(
        f"{name}: folder {folder} not found under data.root={root} (looked for {looked}); put it at {root / folder}/"
        f" ({FILES[name]}: extract {_URLS[name][0]} into {root}), or run with data.download=true on a machine"
        " with a network"
    )


def _batch(path: Path, label_key: str, verify: bool, classes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """One batch file's images (uint8 [N,3,32,32]), labels and, for CIFAR-100, coarse labels; every way the file
    can be wrong (not a dict, missing or ill-typed arrays, labels out of range) is a DataError naming it."""
    if not path.is_file():
        raise DataError(f"{path}: missing file of the CIFAR python distribution")
    raw = read_bytes(path)
    if verify:
        check_md5(path, raw, CIFAR_MD5.get(path.parent.name, {}).get(path.name))
    d = safe_unpickle(raw, str(path))
    try:
        data = np.asarray(d["data"])
        if data.dtype != np.uint8:
            if not np.issubdtype(data.dtype, np.integer) or (data.size and (data.min() < 0 or data.max() > 255)):
                raise ValueError(f"'data' of type {data.dtype}, expected bytes 0-255")
            data = data.astype(np.uint8)
        x = data.reshape(-1, 3, 32, 32)
        y = np.asarray(d[label_key])
        coarse = np.asarray(d["coarse_labels"]) if "coarse_labels" in d else None
    except (KeyError, ValueError, TypeError) as e:
        raise DataError(f"{path}: not a CIFAR batch ({e})") from None
    if y.ndim != 1 or len(x) != len(y) or (coarse is not None and coarse.shape != y.shape):
        raise DataError(f"{path}: {len(x)} images but labels of shape {list(y.shape)}; not a CIFAR batch")
    check_labels(path, y, 0, classes)
    if coarse is not None:
        check_labels(path, coarse, 0, 20)
        coarse = coarse.astype(np.int64)
    return x, y.astype(np.int64), coarse


def _split(parts: list[tuple[np.ndarray, np.ndarray, np.ndarray | None]]) -> Split:
    x = torch.from_numpy(np.concatenate([p[0] for p in parts]))
    y = torch.from_numpy(np.concatenate([p[1] for p in parts]))
    coarse = None if parts[0][2] is None else torch.from_numpy(np.concatenate([p[2] for p in parts]))
    return Split(x, y, coarse=coarse)


def standin_cifar10(p: CIFARParams, rng: np.random.Generator) -> Dataset:
    return image_dataset("cifar10", 10, (3, 32, 32), MEAN["cifar10"], STD["cifar10"], rng)


def standin_cifar100(p: CIFARParams, rng: np.random.Generator) -> Dataset:
    """Fine labels as ``y`` and superclasses as ``coarse`` (superclass = fine // 5: a tree, as Pachinko needs)."""
    d = image_dataset("cifar100", 100, (3, 32, 32), MEAN["cifar100"], STD["cifar100"], rng)
    d.train.coarse, d.test.coarse = d.train.y // 5, d.test.y // 5
    return d


@DATASETS.register(
    "cifar10", CIFARParams, standin=standin_cifar10, signature=lambda p: signature("cifar10", 10, (3, 32, 32), p)
)
def load_cifar10(p: CIFARParams) -> Dataset:
    d = _locate("cifar10", p)
    train = _split([_batch(d / f"data_batch_{i}", "labels", p.verify, 10) for i in range(1, 6)])
    test = _split([_batch(d / "test_batch", "labels", p.verify, 10)])
    return Dataset("cifar10", train, test, 10, (3, 32, 32), MEAN["cifar10"], STD["cifar10"])


@DATASETS.register(
    "cifar100",
    CIFARParams,
    standin=standin_cifar100,
    signature=lambda p: signature("cifar100", 100, (3, 32, 32), p),
)
def load_cifar100(p: CIFARParams) -> Dataset:
    """CIFAR-100 with fine labels as ``y`` and the 20 superclasses kept as ``coarse``."""
    d = _locate("cifar100", p)
    train = _split([_batch(d / "train", "fine_labels", p.verify, 100)])
    test = _split([_batch(d / "test", "fine_labels", p.verify, 100)])
    return Dataset("cifar100", train, test, 100, (3, 32, 32), MEAN["cifar100"], STD["cifar100"])
