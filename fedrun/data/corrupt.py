"""Corrupted-label clients (FedLAW, Li et al. ICML 2023, Sec. 6 and Table 8: "We generate corrupted clients by
swapping two labels in their local training data").

round(fraction * N) clients, drawn without replacement from a generator keyed by (seed, "corrupt") (so every
method at a seed gets the same corrupted clients), hold their training samples of class a labelled b and of
class b labelled a. Only the clients' training labels change: the test split, and so the server's proxy set
carved out of it, stay clean. Which two classes the paper swapped was lost in extraction [?]; ``labels``
defaults to (0, 1). Applied by ``fedrun.run.experiment.build_experiment`` after the partition, so the partition (and
its cache) does not depend on the corruption.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from fedrun.config.schema import CorruptConfig
from fedrun.core.errors import ConfigError
from fedrun.core.rng import np_rng
from fedrun.data.base import Dataset


def corrupted_clients(n_clients: int, fraction: float, seed: int) -> np.ndarray:
    """Sorted ids of the round(fraction * n_clients) corrupted clients (the same for every method at a seed)."""
    k = round(fraction * n_clients)
    return np.sort(np_rng(seed, "corrupt").choice(n_clients, k, replace=False)).astype(np.int64)


def swap_labels(data: Dataset, parts: list[np.ndarray], clients: np.ndarray, labels: tuple[int, int]) -> Dataset:
    """A copy of ``data`` whose training labels a and b are swapped on the samples of ``clients`` (test untouched).

    Raises ConfigError when a label is not a class of the dataset, or when a corrupted client shares a sample
    with another client (a partition with duplicates, e.g. ``dirichlet_equal`` with ``exhausted=refill``).
    """
    a, b = labels
    if max(a, b) >= data.num_classes:
        raise ConfigError(
            "corrupt.labels",
            f"{[a, b]} are not both classes of {data.name}; valid: 0..{data.num_classes - 1}",
        )
    if len(clients) == 0:
        return data
    idx = np.concatenate([parts[c] for c in clients])
    owners = np.zeros(len(data.train), dtype=np.int64)
    for p in parts:
        np.add.at(owners, p, 1)
    if len(np.unique(idx)) != len(idx) or (owners[idx] > 1).any():
        raise ConfigError("corrupt.fraction", "needs a partition whose clients share no training sample")
    y = data.train.y.clone()
    at = torch.as_tensor(idx, dtype=torch.long)
    old = y[at]
    new = old.clone()
    new[old == a], new[old == b] = b, a
    y[at] = new
    return dataclasses.replace(data, train=dataclasses.replace(data.train, y=y))


def apply_corruption(
    data: Dataset, parts: list[np.ndarray], cfg: CorruptConfig, seed: int
) -> tuple[Dataset, np.ndarray]:
    """(the dataset with the corrupted clients' labels swapped, their ids); unchanged when ``fraction`` is 0."""
    clients = corrupted_clients(len(parts), cfg.fraction, seed)
    return swap_labels(data, parts, clients, (cfg.labels[0], cfg.labels[1])), clients
