"""MNIST and Fashion-MNIST from their IDX files."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from fedrun.config.registry import DATASETS
from fedrun.data.base import DataParams, Dataset, Split
from fedrun.data.sources.files import load_idx_split
from fedrun.data.standin import image_dataset, signature

DEBIAN_FMNIST = Path("/usr/share/datasets/fashion-mnist")

# md5 of the *decompressed* files: the Debian package re-compresses the .gz files, so the archives'
# checksums differ from upstream while the contents are identical.
FMNIST_FILES = {
    "train_x": ("train-images-idx3-ubyte", "f4a8712d7a061bf5bd6d2ca38dc4d50a"),
    "train_y": ("train-labels-idx1-ubyte", "9018921c3c673c538a1fc5bad174d6f9"),
    "test_x": ("t10k-images-idx3-ubyte", "8181f5470baa50b63fa0f6fddb340f0a"),
    "test_y": ("t10k-labels-idx1-ubyte", "15d484375f8d13e6eb1aabb0c3f46965"),
}
NORM = {"fmnist": (0.2860, 0.3530), "mnist": (0.1307, 0.3081)}  # (mean, std) of the training images
MNIST_FILES = {k: (stem, None) for k, (stem, _) in FMNIST_FILES.items()}
IDX_NAMES = ", ".join(f"{stem}.gz" for stem, _ in FMNIST_FILES.values())


@dataclass
class MNISTParams(DataParams):
    """``data=mnist`` / ``data=fmnist``."""


def _dataset(name: str, arrays: dict, mean: float, std: float) -> Dataset:
    to_split = lambda x, y: Split(torch.from_numpy(x.copy()).unsqueeze(1), torch.from_numpy(y.astype("int64")))  # noqa: E731
    return Dataset(
        name=name,
        train=to_split(arrays["train_x"], arrays["train_y"]),
        test=to_split(arrays["test_x"], arrays["test_y"]),
        num_classes=10,
        input_shape=(1, 28, 28),
        mean=(mean,),
        std=(std,),
    )


def standin_fmnist(p: MNISTParams, rng: np.random.Generator) -> Dataset:
    return image_dataset("fmnist", 10, (1, 28, 28), (NORM["fmnist"][0],), (NORM["fmnist"][1],), rng)


def standin_mnist(p: MNISTParams, rng: np.random.Generator) -> Dataset:
    return image_dataset("mnist", 10, (1, 28, 28), (NORM["mnist"][0],), (NORM["mnist"][1],), rng)


@DATASETS.register(
    "fmnist", MNISTParams, standin=standin_fmnist, signature=lambda p: signature("fmnist", 10, (1, 28, 28), p)
)
def load_fmnist(p: MNISTParams) -> Dataset:
    root = Path(p.root)
    dirs = [root / "fashion-mnist", root / "FashionMNIST" / "raw", root / "fmnist", root, DEBIAN_FMNIST]
    arrays = load_idx_split(
        "fmnist",
        dirs,
        FMNIST_FILES,
        mirror="http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
        download_dir=root / "fashion-mnist",
        allow_download=p.download,
        verify=p.verify,
        hint=f"put the four IDX files ({IDX_NAMES}) in {root / 'fashion-mnist'}/ or install the Debian package"
        " dataset-fashion-mnist (apt-get install dataset-fashion-mnist), or run with data.download=true on a"
        " machine with a network",
    )
    return _dataset("fmnist", arrays, *NORM["fmnist"])


@DATASETS.register(
    "mnist", MNISTParams, standin=standin_mnist, signature=lambda p: signature("mnist", 10, (1, 28, 28), p)
)
def load_mnist(p: MNISTParams) -> Dataset:
    root = Path(p.root)
    dirs = [root / "mnist", root / "MNIST" / "raw", root]
    arrays = load_idx_split(
        "mnist",
        dirs,
        MNIST_FILES,
        mirror="https://ossci-datasets.s3.amazonaws.com/mnist/",
        download_dir=root / "mnist",
        allow_download=p.download,
        verify=p.verify,
        hint=f"put the four IDX files ({IDX_NAMES}) in {root / 'mnist'}/, or run with data.download=true on a"
        " machine with a network",
    )
    return _dataset("mnist", arrays, *NORM["mnist"])
