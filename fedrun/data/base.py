"""Dataset containers: the whole split as tensors, with the metadata partitions need."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from omegaconf import OmegaConf

from fedrun.config.registry import positive
from fedrun.core.errors import ConfigError

NORMALIZE = ("dataset", "half", "none", "fedcos")
# FedCos's code (benjiachong/FedCos main_fed.py lines 80-112): (mean, std) per channel by dataset; its CIFAR-10
# std is the widely copied (0.2023, 0.1994, 0.2010), not the training set's (0.2470, 0.2435, 0.2616)
FEDCOS_NORM = {
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010)),
    "fmnist": ((0.5,), (0.5,)),
    "mnist": ((0.1307,), (0.3081,)),
}
AUGMENT = ("none", "crop_flip", "flip_crop_half")
# data.root's default: $FEDRUN_DATA, else data/ of the current directory; Hydra resolves it while composing
DATA_ROOT = "${oc.env:FEDRUN_DATA,data}"


@dataclass
class DataParams:
    """Fields every dataset accepts (``data.*``)."""

    root: str = DATA_ROOT  # standard files are looked for under here: $FEDRUN_DATA, else ./data
    # fetch (with checksum) when missing and a network exists; EMNIST (a 560 MB zip) and Shakespeare never download
    download: bool = False
    # files missing (and not downloaded) -> a seeded random stand-in of the same shape (fedrun/data/standin.py);
    # for -smoke runs only: their numbers mean nothing (summary.json data_standin, fedrun-report says so)
    standin: bool = False
    max_train_samples: int | None = None  # a seeded random subset, for quick runs
    max_test_samples: int | None = None  # a seeded random subset of the test split, for quick runs
    verify: bool = True  # check checksums/sizes of known files; false for subsets re-written in the same format
    longtail_rho: float | None = None  # long-tailed training data, imbalance ratio rho >= 1 (FedLAW Table 7)
    # zero-pad images to image_size x image_size (the MNIST family's 28 px -> 32 for the CIFAR models, ResNet-8/20,
    # WRN, DenseNet); None: as stored. See :func:`pad_images`.
    image_size: int | None = None
    # each client holds out this fraction of its data and trains on the rest (FedLAW code: 0.3); see holdout.py
    client_valid_ratio: float = 0.0
    # input scaling after /255: dataset (its per-channel mean/std) | half (mean = std = 0.5) | none ([0, 1]) |
    # fedcos (FedCos's code's constants, FEDCOS_NORM)
    normalize: str = "dataset"
    # on-device augmentation of client training batches (see augment.py): none | crop_flip (torchvision
    # RandomCrop(pad 4) + RandomHorizontalFlip) | flip_crop_half (FL-Simulator: flip, then crop w.p. 1/2)
    augment: str = "none"
    # the test split is appended to the training split before partitioning (PFLlib: its generators merge the two
    # and split each client's share 75/25; pair with eval.local_test=split). The test split is kept for test_acc,
    # which then scores images that are also in clients' data: the held-out measure is local_* (personalised.md)
    merge_test: bool = False

    def __post_init__(self) -> None:
        if self.root == DATA_ROOT:  # built without Hydra composing it (a test, a mapping without root)
            self.root = str(OmegaConf.create({"root": DATA_ROOT}).root)
        positive("max_train_samples", self.max_train_samples)
        positive("max_test_samples", self.max_test_samples)
        positive("image_size", self.image_size)
        if self.longtail_rho is not None and self.longtail_rho < 1:
            raise ConfigError("longtail_rho", f"must be >= 1 (1 = balanced), got {self.longtail_rho}")
        if not 0 <= self.client_valid_ratio < 1:
            raise ConfigError("client_valid_ratio", f"must be in [0, 1), got {self.client_valid_ratio}")
        if self.normalize not in NORMALIZE:
            raise ConfigError("normalize", f"invalid value {self.normalize!r}; valid: {', '.join(NORMALIZE)}")
        if self.augment not in AUGMENT:
            raise ConfigError("augment", f"invalid value {self.augment!r}; valid: {', '.join(AUGMENT)}")


@dataclass
class Split:
    """One split held as tensors: ``x`` uint8 images [N,C,H,W] (or float features / long tokens), ``y`` [N]."""

    x: torch.Tensor
    y: torch.Tensor
    domain: torch.Tensor | None = None
    coarse: torch.Tensor | None = None

    def __len__(self) -> int:
        return int(self.y.shape[0])

    def subset(self, idx: np.ndarray | torch.Tensor) -> Split:
        idx = torch.as_tensor(idx, dtype=torch.long)
        pick = lambda t: None if t is None else t[idx]  # noqa: E731
        return Split(self.x[idx], self.y[idx], pick(self.domain), pick(self.coarse))

    def to(self, device: torch.device | str) -> Split:
        mv = lambda t: None if t is None else t.to(device)  # noqa: E731
        return Split(self.x.to(device), self.y.to(device), mv(self.domain), mv(self.coarse))


@dataclass
class Dataset:
    """A dataset as fedrun sees it: train/test splits plus how to turn stored ``x`` into model input."""

    name: str
    train: Split
    test: Split
    num_classes: int
    input_shape: tuple[int, ...]
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    domain_names: list[str] | None = None
    natural_clients: list[np.ndarray] | None = None
    notes: dict[str, str] = field(default_factory=dict)
    standin: str | None = None  # why seeded random stand-in data replaced the real files; None: the real data
    stats: dict[str, Any] = field(default_factory=dict)  # the source and its statistics (summary.json data_stats)

    def cap(self, max_train: int | None, max_test: int | None, seed: int) -> Dataset:
        """A copy with at most ``max_train``/``max_test`` samples (a seeded random subset, order kept)."""
        out = dataclasses.replace(self)
        rng = np.random.default_rng(seed)
        if max_train is not None and max_train < len(self.train):
            keep = np.sort(rng.choice(len(self.train), max_train, replace=False))
            out.train = self.train.subset(keep)
            if self.natural_clients is not None:
                remap = -np.ones(len(self.train), dtype=np.int64)
                remap[keep] = np.arange(len(keep))
                out.natural_clients = [remap[c][remap[c] >= 0] for c in self.natural_clients]
        if max_test is not None and max_test < len(self.test):
            out.test = self.test.subset(np.sort(rng.choice(len(self.test), max_test, replace=False)))
        return out

    def merged(self) -> Dataset:
        """A copy whose training split is the training split followed by the test split (``data.merge_test``,
        PFLlib's order: its generators extend the training images by the test images); the test split is kept."""

        def cat(a: torch.Tensor | None, b: torch.Tensor | None) -> torch.Tensor | None:
            return None if a is None or b is None else torch.cat([a, b])

        t, s = self.train, self.test
        if t.x.shape[1:] != s.x.shape[1:] or (t.domain is None) != (s.domain is None):
            raise ConfigError(
                "data.merge_test", f"{self.name}'s training and test splits differ in shape; valid: false"
            )
        train = Split(torch.cat([t.x, s.x]), torch.cat([t.y, s.y]), cat(t.domain, s.domain), cat(t.coarse, s.coarse))
        return dataclasses.replace(self, train=train)

    def normalised(self, mode: str) -> Dataset:
        """A copy whose images are scaled as ``mode`` says: ``dataset`` keeps its mean/std, ``half`` uses
        mean = std = 0.5 per channel (to [-1, 1], FedLAW's CIFAR code), ``none`` leaves them in [0, 1]
        (FedLAW's Fashion-MNIST code: ``ToTensor()`` alone), ``fedcos`` uses FedCos's code's constants
        (:data:`FEDCOS_NORM`; a ConfigError for a dataset its code does not load)."""
        if mode == "dataset" or self.mean is None:
            return self
        if mode == "none":
            return dataclasses.replace(self, mean=None, std=None)
        if mode == "fedcos":
            if self.name not in FEDCOS_NORM:
                raise ConfigError(
                    "data.normalize", f"fedcos is defined for {', '.join(FEDCOS_NORM)}, not {self.name}; valid: dataset"
                )
            mean, std = FEDCOS_NORM[self.name]
            return dataclasses.replace(self, mean=mean, std=std)
        return dataclasses.replace(self, mean=(0.5,) * len(self.mean), std=(0.5,) * len(self.std))  # type: ignore[arg-type]


def pad_images(data: Dataset, size: int | None) -> Dataset:
    """``data`` with its images zero-padded to ``size`` x ``size`` (``data.image_size``); None: unchanged.

    The stored pixels get a border of 0 (black, before normalisation), split evenly (the extra pixel of an
    odd margin at the bottom/right), as torchvision's ``Pad(2)`` makes MNIST 32 x 32 for LeNet-5. So the
    MNIST family (28 px) runs the CIFAR-sized models (ResNet-8/20, WRN, DenseNet, SimpleCNN). Padding only:
    images larger than ``size``, or data that is not images, is a ConfigError.
    """
    if size is None:
        return data
    shape = data.input_shape
    if len(shape) != 3 or data.train.x.dtype != torch.uint8:
        raise ConfigError("data.image_size", f"{data.name} is not image data (input {list(shape)}); valid: null")
    h, w = shape[1:]
    if (h, w) == (size, size):
        return data
    if h > size or w > size:
        raise ConfigError(
            "data.image_size", f"{size} is smaller than {data.name}'s {h}x{w} images; valid: null or >= {max(h, w)}"
        )
    top, left = (size - h) // 2, (size - w) // 2
    margins = (left, size - w - left, top, size - h - top)

    def pad(s: Split) -> Split:
        return dataclasses.replace(s, x=torch.nn.functional.pad(s.x, margins, value=0))

    return dataclasses.replace(data, train=pad(data.train), test=pad(data.test), input_shape=(shape[0], size, size))


class Preprocess(torch.nn.Module):
    """Stored ``x`` -> float model input: uint8 images are scaled to [0,1] and normalised per channel."""

    def __init__(self, mean: tuple[float, ...] | None, std: tuple[float, ...] | None, dtype: torch.dtype) -> None:
        super().__init__()
        self.dtype = dtype
        if mean is None:
            self.mean = self.std = None
        else:
            shape = (-1, 1, 1)
            self.register_buffer("mean", torch.tensor(mean, dtype=dtype).view(shape), persistent=False)
            self.register_buffer("std", torch.tensor(std, dtype=dtype).view(shape), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.uint8:
            x = x.to(self.dtype).div_(255.0)
            if self.mean is not None:
                x = (x - self.mean) / self.std
            return x
        if x.is_floating_point():
            return x.to(self.dtype)
        return x  # token ids


def check_clients_vs_samples(n_clients: int, n_samples: int) -> None:
    if n_clients > n_samples:
        raise ConfigError("fl.clients", f"{n_clients} clients but only {n_samples} training samples")
