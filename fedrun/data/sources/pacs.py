"""PACS (Li et al. 2017): photo, art_painting, cartoon, sketch; 7 classes. As FedIMA uses it
(TailinZhou/FedIMA PACS_dataloader.py): a random 10% of each domain is the test set, images are
Resize(256) + CenterCrop(224) with ImageNet normalisation.

Looked for under ``data.root``:

1. image folders ``PACS/<domain>/<class>/*`` (also ``PACS/kfold/<domain>/...``, ``pacs_data/<domain>/...``),
   decoded with Pillow;
2. an ``.npz`` dump per domain ``PACS/<domain>.npz`` with ``x`` (uint8 [N,H,W,3] or [N,3,H,W]) and ``y``
   (labels 0-6 in the class order below), resized to ``crop`` when needed.

All images are held in memory as uint8 (about 1.5 GB at 224 px): lower ``resize``/``crop`` for quick runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from fedrun.config.registry import DATASETS, in_range, positive
from fedrun.core.errors import ConfigError, DataError, DataMissing
from fedrun.data.base import DataParams, Dataset, Split
from fedrun.data.sources.files import check_labels
from fedrun.data.sources.images import load_npz, read_image_folder, to_chw_uint8
from fedrun.data.standin import image_dataset, signature

DOMAINS = ("photo", "art_painting", "cartoon", "sketch")
CLASSES = ("dog", "elephant", "giraffe", "guitar", "horse", "house", "person")
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


@dataclass
class PACSParams(DataParams):
    """``data=pacs``: ``domains``, ``resize`` (shorter side) then centre ``crop``, ``test_fraction`` per domain."""

    domains: list[str] = field(default_factory=lambda: list(DOMAINS))  # PACS's four, in order
    resize: int = 256  # the shorter side, then a centre crop (FedIMA: 256 -> 224)
    crop: int = 224  # the centre crop (FedIMA: 224)
    test_fraction: float = 0.1  # a random part of each domain is the test set (FedIMA: 10%)
    seed: int = 0  # draws the test set

    def __post_init__(self) -> None:
        super().__post_init__()
        bad = [d for d in self.domains if d not in DOMAINS]
        if bad or not self.domains or len(set(self.domains)) != len(self.domains):
            raise ConfigError("domains", f"invalid {self.domains}; distinct names from: {', '.join(DOMAINS)}")
        positive("resize", self.resize)
        positive("crop", self.crop)
        if self.crop > self.resize:
            raise ConfigError("crop", f"{self.crop} is larger than resize={self.resize}")
        in_range("test_fraction", self.test_fraction, 0.0, 1.0, lo_open=True)


def load_domain(root: Path, name: str, p: PACSParams) -> tuple[np.ndarray, np.ndarray]:
    """All images of one domain as uint8 [N,3,crop,crop] and labels."""
    for base in (root / "PACS", root / "PACS" / "kfold", root / "pacs_data", root / "pacs"):
        if (base / name).is_dir():
            return read_image_folder(base / name, list(CLASSES), p.resize, p.crop)
        npz = base / f"{name}.npz"
        if npz.is_file():
            z = load_npz(npz, ("x", "y"))
            y = z["y"].reshape(-1)
            if len(y) != len(z["x"]):
                raise DataError(f"{npz}: {len(z['x'])} images, {len(y)} labels; labels must be 0-6")
            check_labels(npz, y, 0, len(CLASSES))
            return to_chw_uint8(z["x"], p.crop, name=str(npz)).numpy(), y.astype(np.int64)
    raise DataMissing(
        f"pacs: domain {name} not found under data.root={root} (looked for PACS/{name}/<class>/ and"
        f" PACS/{name}.npz); put PACS's images at {root / 'PACS'}/<domain>/<class>/*.jpg (domains"
        f" {', '.join(DOMAINS)}; classes {', '.join(CLASSES)}: the 'kfold' images of"
        " https://domaingeneralization.github.io) or <domain>.npz files (x, y) there; data.download=true cannot"
        " fetch PACS (no automatic download)"
    )


def _split(parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> Split:
    x, y, d = (torch.from_numpy(np.concatenate([p[i] for p in parts])) for i in range(3))
    return Split(x, y, domain=d)


def standin_pacs(p: PACSParams, rng: np.random.Generator) -> Dataset:
    shape = (3, p.crop, p.crop)
    return image_dataset("pacs", len(CLASSES), shape, IMAGENET_MEAN, IMAGENET_STD, rng, list(p.domains))


@DATASETS.register(
    "pacs",
    PACSParams,
    standin=standin_pacs,
    signature=lambda p: signature("pacs", len(CLASSES), (3, p.crop, p.crop), p),
)
def load_pacs(p: PACSParams) -> Dataset:
    """PACS with a random ``test_fraction`` of each domain held out and a domain id per sample."""
    if p.download:
        raise DataError(f"pacs: no automatic download; extract PACS to {Path(p.root) / 'PACS'}")
    rng = np.random.default_rng(p.seed)
    train: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    test: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for d, name in enumerate(p.domains):
        x, y = load_domain(Path(p.root), name, p)
        perm = rng.permutation(len(y))
        n_test = int(round(p.test_fraction * len(y)))
        for out, idx in ((test, np.sort(perm[:n_test])), (train, np.sort(perm[n_test:]))):
            out.append((x[idx], y[idx], np.full(len(idx), d, dtype=np.int64)))
    return Dataset(
        name="pacs",
        train=_split(train),
        test=_split(test),
        num_classes=len(CLASSES),
        input_shape=(3, p.crop, p.crop),
        mean=IMAGENET_MEAN,
        std=IMAGENET_STD,
        domain_names=list(p.domains),
    )
