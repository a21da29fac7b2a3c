"""Stand-in data: a seeded random dataset with a real dataset's interface, used when its files are missing.

Only with ``data.standin=true`` (the ``-smoke`` shrink of fedrun/papers/smoke.py sets it; nothing else does)
and only when the source raises :class:`~fedrun.core.errors.DataMissing` (its files are not under ``data.root``
and were not downloaded); a corrupt file is still an error, and present files are read as always.

A stand-in has what models and partitions read from the real dataset: the number of classes (EMNIST by
split, CIFAR-100's 20 superclasses as ``coarse``), the input shape and dtype (uint8 images at the source's
size, PACS at ``crop``; Shakespeare's token windows over its 80-symbol vocabulary), the normalisation
constants, a domain id per sample (Digit-Five, PACS, fmnist_domains: ``domains`` in order) and natural
clients (Shakespeare speakers, FEMNIST writers). Labels are balanced (every class, and every class in
every domain, about equally often) and learnable: an image is its class's coarse 4x4 pattern plus noise
(plus a per-domain tint); a Shakespeare window follows a random Markov chain whose next symbol is the
target. It is small (a few thousand samples, PACS fewer at 224 px) and the same for every run: seeded by
the dataset name and the source's own ``seed`` where it has one.

Each source declares its stand-in (classes, shape, size) beside its loader, in fedrun/data/sources/, and
registers it with the loader (``@DATASETS.register(name, Params, standin=...)``); this module holds what
they share.
"""

from __future__ import annotations

import dataclasses
import math
import zlib
from collections.abc import Callable

import numpy as np
import torch

from fedrun.config.registry import DATASETS, DataSignature
from fedrun.core.errors import ConfigError, DataMissing
from fedrun.data.base import DataParams, Dataset, Split, pad_images

N_TRAIN, N_TEST = 2000, 500
MAX_BYTES = 80 * 2**20  # images held (train + test): PACS at 224 px gets 445 + 111

Loader = Callable[[DataParams], Dataset]
# the third way out of a missing dataset, after placing its files and data.download=true (each source's message)
STANDIN_WAY = "or data.standin=true for a dry run on stand-in data of the same shape (its numbers mean nothing)"


def with_standin(name: str, loader: Loader) -> Loader:
    """``loader``, falling back to :func:`standin` when its files are missing and ``params.standin`` is set;
    either way with the images zero-padded to ``params.image_size`` (:func:`~fedrun.data.base.pad_images`)."""

    def load(p: DataParams) -> Dataset:
        try:
            data = loader(p)
        except DataMissing as e:
            if DATASETS.get(name).standin is None:
                raise
            if not getattr(p, "standin", False):
                raise DataMissing(f"{e}; {STANDIN_WAY}") from None
            data = dataclasses.replace(standin(name, p), standin=str(e))
        return pad_images(data, getattr(p, "image_size", None))

    return load


def signature(name: str, classes: int, shape: tuple[int, ...], p: DataParams, inputs: str = "images") -> DataSignature:
    """Dataset ``name``'s signature (fedrun/config/registry.py :class:`DataSignature`) for loader parameters
    ``p``: images of ``shape`` as ``data.image_size`` pads them, by the rule of :func:`~fedrun.data.base.pad_images`,
    whose errors it raises before any file is read."""
    size = getattr(p, "image_size", None)
    if size is not None and inputs != "images":
        raise ConfigError("data.image_size", f"{name} is not image data (input {list(shape)}); valid: null")
    if size is not None:
        c, h, w = shape
        if h > size or w > size:
            why = f"{size} is smaller than {name}'s {h}x{w} images; valid: null or >= {max(h, w)}"
            raise ConfigError("data.image_size", why)
        shape = (c, size, size)
    return DataSignature(tuple(shape), classes, inputs)


def standin(name: str, p: DataParams) -> Dataset:
    """The stand-in of dataset ``name`` for loader parameters ``p`` (deterministic)."""
    rng = np.random.default_rng([zlib.crc32(name.encode()), getattr(p, "seed", 0)])
    build = DATASETS.get(name).standin
    assert build is not None, f"data source {name!r} registered no stand-in"
    data = build(p, rng)
    data.notes["standin"] = "seeded random data with this dataset's interface; not the dataset"
    return data


def balanced(n: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` labels in ``0..k-1``, each about n/k times, in random order."""
    return rng.permutation(np.arange(n) % k).astype(np.int64)


def sizes(shape: tuple[int, ...], n_train: int = N_TRAIN, n_test: int = N_TEST) -> tuple[int, int]:
    """Train/test sizes, shrunk (test kept at a quarter of train) so the images stay within ``MAX_BYTES``."""
    per = math.prod(shape)
    train = min(n_train, max(100, MAX_BYTES * n_train // ((n_train + n_test) * per)))
    return train, max(1, train * n_test // n_train)


def images(
    n: int, shape: tuple[int, ...], y: np.ndarray, classes: int, rng: np.random.Generator, dom: np.ndarray | None = None
) -> np.ndarray:
    """uint8 [n, *shape]: each class's coarse 4x4 pattern (values < 160) + noise (< 64) + a tint per domain (< 32)."""
    c, h, w = shape
    proto = rng.integers(0, 160, (classes, c, 4, 4), dtype=np.uint8)
    proto = np.repeat(np.repeat(proto, -(-h // 4), axis=2), -(-w // 4), axis=3)[:, :, :h, :w]
    x = proto[y]
    x += rng.integers(0, 64, x.shape, dtype=np.uint8)
    if dom is not None:
        tint = rng.integers(0, 32, (int(dom.max()) + 1, c, 1, 1), dtype=np.uint8)
        x += tint[dom]
    return x


def image_dataset(
    name: str,
    classes: int,
    shape: tuple[int, ...],
    mean: tuple[float, ...] | None,
    std: tuple[float, ...] | None,
    rng: np.random.Generator,
    domain_names: list[str] | None = None,
) -> Dataset:
    """Balanced labels (and domains), train and test drawn alike and split."""
    n_train, n_test = sizes(shape)
    n = n_train + n_test
    y = balanced(n, classes, rng)
    dom = balanced(n, len(domain_names), rng) if domain_names else None
    x = torch.from_numpy(images(n, shape, y, classes, rng, dom))
    yt = torch.from_numpy(y)
    dt = None if dom is None else torch.from_numpy(dom)
    part = lambda s: Split(x[s], yt[s], None if dt is None else dt[s])  # noqa: E731
    return Dataset(
        name, part(slice(0, n_train)), part(slice(n_train, n)), classes, shape, mean, std, domain_names=domain_names
    )
