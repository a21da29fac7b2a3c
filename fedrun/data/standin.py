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
"""

from __future__ import annotations

import dataclasses
import math
import zlib
from collections.abc import Callable

import numpy as np
import torch

from fedrun.core.errors import DataMissing
from fedrun.data.base import DataParams, Dataset, Split, pad_images
from fedrun.data.sources import cifar, digit5, emnist, fmnist_domains, mnist, pacs, shakespeare

N_TRAIN, N_TEST = 2000, 500
MAX_BYTES = 80 * 2**20  # images held (train + test): PACS at 224 px gets 445 + 111
SPEAKERS = 160  # Shakespeare: natural clients (FedCos Table V samples from 143)
WRITERS = 100  # FEMNIST (emnist source=leaf)

Loader = Callable[[DataParams], Dataset]


def with_standin(name: str, loader: Loader) -> Loader:
    """``loader``, falling back to :func:`standin` when its files are missing and ``params.standin`` is set;
    either way with the images zero-padded to ``params.image_size`` (:func:`~fedrun.data.base.pad_images`)."""

    def load(p: DataParams) -> Dataset:
        try:
            data = loader(p)
        except DataMissing as e:
            if not getattr(p, "standin", False) or name not in BUILDERS:
                raise
            data = dataclasses.replace(standin(name, p), standin=str(e))
        return pad_images(data, getattr(p, "image_size", None))

    return load


def standin(name: str, p: DataParams) -> Dataset:
    """The stand-in of dataset ``name`` for loader parameters ``p`` (deterministic)."""
    rng = np.random.default_rng([zlib.crc32(name.encode()), getattr(p, "seed", 0)])
    data = BUILDERS[name](p, rng)
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


def _mnist_like(name: str) -> Callable[[DataParams, np.random.Generator], Dataset]:
    def build(p: DataParams, rng: np.random.Generator) -> Dataset:
        m, s = mnist.NORM[name]
        return image_dataset(name, 10, (1, 28, 28), (m,), (s,), rng)

    return build


def _cifar10(p: DataParams, rng: np.random.Generator) -> Dataset:
    return image_dataset("cifar10", 10, (3, 32, 32), cifar.MEAN["cifar10"], cifar.STD["cifar10"], rng)


def _cifar100(p: DataParams, rng: np.random.Generator) -> Dataset:
    """Fine labels as ``y`` and superclasses as ``coarse`` (superclass = fine // 5: a tree, as Pachinko needs)."""
    d = image_dataset("cifar100", 100, (3, 32, 32), cifar.MEAN["cifar100"], cifar.STD["cifar100"], rng)
    d.train.coarse, d.test.coarse = d.train.y // 5, d.test.y // 5
    return d


def _emnist(p: emnist.EMNISTParams, rng: np.random.Generator) -> Dataset:
    if p.source == "leaf":
        d = image_dataset("emnist", 62, (1, 28, 28), None, None, rng)
        writer = balanced(len(d.train), WRITERS, rng)
        d.natural_clients = [np.flatnonzero(writer == k) for k in range(WRITERS)]
        d.notes = {"source": "leaf", "writers": str(WRITERS)}
        return d
    d = image_dataset("emnist", emnist.CLASSES[p.split], (1, 28, 28), emnist.MEAN, emnist.STD, rng)
    d.notes = {"split": p.split, "fraction": str(p.fraction)}
    return d


def _digit5(p: digit5.Digit5Params, rng: np.random.Generator) -> Dataset:
    return image_dataset("digit5", 10, (3, 28, 28), (0.5,) * 3, (0.5,) * 3, rng, list(p.domains))


def _pacs(p: pacs.PACSParams, rng: np.random.Generator) -> Dataset:
    shape = (3, p.crop, p.crop)
    return image_dataset("pacs", len(pacs.CLASSES), shape, pacs.IMAGENET_MEAN, pacs.IMAGENET_STD, rng, list(p.domains))


def _fmnist_domains(p: fmnist_domains.FMNISTDomainsParams, rng: np.random.Generator) -> Dataset:
    return image_dataset("fmnist_domains", 10, (3, 28, 28), (0.5,) * 3, (0.5,) * 3, rng, list(p.domains))


def _shakespeare(p: shakespeare.ShakespeareParams, rng: np.random.Generator) -> Dataset:
    """``SPEAKERS`` natural clients; each speaker's text is a walk on one random Markov chain over the
    vocabulary, cut into ``seq_len`` windows whose target is the next symbol (train first, then test)."""
    vocab, t = len(shakespeare.ALL_LETTERS), p.seq_len
    n_train, n_test = SPEAKERS * 40, SPEAKERS * 10
    per_train = 1 + rng.multinomial(n_train - SPEAKERS, np.full(SPEAKERS, 1 / SPEAKERS))
    per_test = 1 + rng.multinomial(n_test - SPEAKERS, np.full(SPEAKERS, 1 / SPEAKERS))
    cum = np.cumsum(rng.dirichlet(np.full(vocab, 0.3), vocab), axis=1)
    length = per_train + per_test + t
    stream = np.empty((SPEAKERS, int(length.max())), dtype=np.int64)
    stream[:, 0] = rng.integers(0, vocab, SPEAKERS)
    for i in range(1, stream.shape[1]):  # one step of every speaker's walk at a time
        u = rng.random(SPEAKERS)[:, None]
        stream[:, i] = np.minimum((cum[stream[:, i - 1]] < u).sum(1), vocab - 1)
    xs: list[np.ndarray] = []
    ys: list[np.ndarray] = []
    txs: list[np.ndarray] = []
    tys: list[np.ndarray] = []
    for k in range(SPEAKERS):
        s = stream[k, : length[k]]
        win = np.lib.stride_tricks.sliding_window_view(s[:-1], t)
        a, b = per_train[k], per_train[k] + per_test[k]
        xs.append(win[:a])
        ys.append(s[t : t + a])
        txs.append(win[a:b])
        tys.append(s[t + a : t + b])
    starts = np.concatenate([[0], np.cumsum(per_train)])
    cat = lambda parts: torch.from_numpy(np.ascontiguousarray(np.concatenate(parts)))  # noqa: E731
    return Dataset(
        "shakespeare",
        Split(cat(xs).to(shakespeare.TOKENS), cat(ys)),
        Split(cat(txs).to(shakespeare.TOKENS), cat(tys)),
        vocab,
        (t,),
        natural_clients=[np.arange(starts[k], starts[k + 1]) for k in range(SPEAKERS)],
        notes={"users": str(SPEAKERS), "unknown_chars": "0"},
    )


BUILDERS: dict[str, Callable[..., Dataset]] = {
    "mnist": _mnist_like("mnist"),
    "fmnist": _mnist_like("fmnist"),
    "emnist": _emnist,
    "cifar10": _cifar10,
    "cifar100": _cifar100,
    "digit5": _digit5,
    "pacs": _pacs,
    "fmnist_domains": _fmnist_domains,
    "shakespeare": _shakespeare,
}
