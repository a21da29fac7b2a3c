"""Digit-Five (MNIST, SVHN, USPS, SynthDigits, MNIST-M) as FedIMA uses it: FedBN's preprocessed data, all
train partitions, 3x28x28, normalised with mean = std = 0.5 (TailinZhou/FedIMA mixed_digit_dataloader.py).

Each domain is looked for, in this order, under ``data.root``:

1. FedBN's dumps: ``digit_dataset/<MNIST|SVHN|USPS|SynthDigits|MNIST_M>/partitions/train_part*.pkl`` and
   ``.../test.pkl`` (each a pickled ``(images, labels)`` pair; read without executing pickled code);
2. an ``.npz`` dump per domain: ``digit5/<domain>.npz`` with ``x_train, y_train, x_test, y_test``;
3. image folders: ``digit5/<domain>/<train|test>/<class 0-9>/*.png``.

Grey domains are repeated to 3 channels and other sizes resized to 28x28. Every sample carries its domain
id; ``domain_names`` are ``mnist, svhn, usps, synth, mnistm``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from fedrun.config.registry import DATASETS
from fedrun.core.errors import ConfigError, DataError, DataMissing
from fedrun.data.base import DataParams, Dataset, Split
from fedrun.data.sources.files import check_labels
from fedrun.data.sources.images import load_npz, load_pickled_pair, read_image_folder, to_chw_uint8
from fedrun.data.standin import image_dataset, signature

FEDBN_FOLDERS = {"mnist": "MNIST", "svhn": "SVHN", "usps": "USPS", "synth": "SynthDigits", "mnistm": "MNIST_M"}
HINT = (
    "put FedBN's preprocessed Digit-Five (github.com/med-air/FedBN, 'digit_dataset') at"
    " {root}/digit_dataset/<MNIST|SVHN|USPS|SynthDigits|MNIST_M>/partitions/*.pkl, or give"
    " {root}/digit5/<domain>.npz (x_train, y_train, x_test, y_test) or {root}/digit5/<domain>/{{train,test}}/<0-9>/"
    " image folders; data.download=true cannot fetch Digit-Five (no automatic download)"
)


@dataclass
class Digit5Params(DataParams):
    """``data=digit5``: which ``domains`` to load (in order)."""

    domains: list[str] = field(default_factory=lambda: list(FEDBN_FOLDERS))  # Digit-Five's five (FedBN, FedIMA)

    def __post_init__(self) -> None:
        super().__post_init__()
        bad = [d for d in self.domains if d not in FEDBN_FOLDERS]
        if bad or not self.domains or len(set(self.domains)) != len(self.domains):
            raise ConfigError("domains", f"invalid {self.domains}; distinct names from: {', '.join(FEDBN_FOLDERS)}")


Arrays = tuple[np.ndarray, np.ndarray]


def _check(path: Path, x: np.ndarray, y: np.ndarray) -> None:
    """As many images as labels, labels 0-9: a DataError naming the file otherwise."""
    if y.ndim != 1 or len(x) != len(y):
        raise DataError(f"{path}: {len(x)} images but labels of shape {list(y.shape)}")
    check_labels(path, y, 0, 10)


def _fedbn(root: Path, name: str) -> tuple[Arrays, Arrays] | None:
    for base in (root / "digit_dataset", root / "digit5", root):
        d = base / FEDBN_FOLDERS[name]
        parts = sorted((d / "partitions").glob("train_part*.pkl"))
        test = d / "test.pkl"
        if parts and test.is_file():
            pairs = [load_pickled_pair(p) for p in parts]
            for (px, py), p in zip(pairs, parts, strict=True):
                _check(p, px, py)
            x = np.concatenate(
                [to_chw_uint8(px, 28, name=str(p)).numpy() for (px, _), p in zip(pairs, parts, strict=True)]
            )
            y = np.concatenate([py for _, py in pairs])
            tx, ty = load_pickled_pair(test)
            _check(test, tx, ty)
            return (x, y), (to_chw_uint8(tx, 28, name=str(test)).numpy(), ty)
    return None


def _npz(root: Path, name: str) -> tuple[Arrays, Arrays] | None:
    path = root / "digit5" / f"{name}.npz"
    if not path.is_file():
        return None
    z = load_npz(path, ("x_train", "y_train", "x_test", "y_test"))
    _check(path, z["x_train"], z["y_train"])
    _check(path, z["x_test"], z["y_test"])
    to = lambda x: to_chw_uint8(x, 28, name=str(path)).numpy()  # noqa: E731
    return (to(z["x_train"]), z["y_train"].astype(np.int64)), (to(z["x_test"]), z["y_test"].astype(np.int64))


def _folders(root: Path, name: str) -> tuple[Arrays, Arrays] | None:
    d = root / "digit5" / name
    if not (d / "train").is_dir() or not (d / "test").is_dir():
        return None
    classes = [str(k) for k in range(10)]
    tr = read_image_folder(d / "train", classes, 28, 28)
    te = read_image_folder(d / "test", classes, 28, 28)
    return tr, te


def load_domain(root: Path, name: str) -> tuple[Arrays, Arrays]:
    """(train, test) arrays of one Digit-Five domain, from the first layout found."""
    for reader in (_fedbn, _npz, _folders):
        got = reader(root, name)
        if got is not None:
            for x, y in got:
                if len(x) != len(y) or (len(y) and (y.min() < 0 or y.max() > 9)):
                    raise DataError(f"digit5/{name}: {len(x)} images, {len(y)} labels, labels must be 0-9")
            return got
    raise DataMissing(f"digit5: domain {name} not found under data.root={root}; " + HINT.format(root=root))


def _stack(parts: list[Arrays]) -> Split:
    x = torch.from_numpy(np.concatenate([p[0] for p in parts]))
    y = torch.from_numpy(np.concatenate([p[1] for p in parts]))
    dom = torch.from_numpy(np.concatenate([np.full(len(p[1]), d, dtype=np.int64) for d, p in enumerate(parts)]))
    return Split(x, y, domain=dom)


def standin_digit5(p: Digit5Params, rng: np.random.Generator) -> Dataset:
    return image_dataset("digit5", 10, (3, 28, 28), (0.5,) * 3, (0.5,) * 3, rng, list(p.domains))


@DATASETS.register(
    "digit5", Digit5Params, standin=standin_digit5, signature=lambda p: signature("digit5", 10, (3, 28, 28), p)
)
def load_digit5(p: Digit5Params) -> Dataset:
    """All requested domains concatenated, with a domain id per sample (train and test)."""
    if p.download:
        raise DataError("digit5: no automatic download; " + HINT.format(root=p.root))
    got = [load_domain(Path(p.root), name) for name in p.domains]
    return Dataset(
        name="digit5",
        train=_stack([g[0] for g in got]),
        test=_stack([g[1] for g in got]),
        num_classes=10,
        input_shape=(3, 28, 28),
        mean=(0.5, 0.5, 0.5),
        std=(0.5, 0.5, 0.5),
        domain_names=list(p.domains),
    )
