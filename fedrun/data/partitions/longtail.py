"""Long-tailed training data before partitioning (FedLAW, Table 7: rho=5).

FedLAW's code keeps int(n_k * (1/rho)^(k/(C-1))) samples of class k, so class 0 keeps all its samples
and class C-1 keeps 1/rho of them; the (usual) partition is then applied to what is left. Applied by
``fedrun.run.experiment.load_data`` when ``data.longtail_rho`` is set.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from fedrun.data.base import Dataset


def longtail_counts(class_sizes: np.ndarray, rho: float) -> np.ndarray:
    """Samples kept per class: int(n_k * (1/rho)^(k/(C-1)))."""
    c = len(class_sizes)
    k = np.arange(c)
    frac = (1.0 / rho) ** (k / max(c - 1, 1))
    return (class_sizes * frac).astype(np.int64)


def longtail_indices(labels: np.ndarray, num_classes: int, rho: float, rng: np.random.Generator) -> np.ndarray:
    """Sorted indices of a random subset whose class counts follow :func:`longtail_counts`."""
    sizes = np.bincount(labels, minlength=num_classes)
    keep = longtail_counts(sizes, rho)
    out = [rng.choice(np.flatnonzero(labels == k), keep[k], replace=False) for k in range(num_classes)]
    return np.sort(np.concatenate(out))


def apply_longtail(data: Dataset, rho: float, rng: np.random.Generator) -> Dataset:
    """A copy of ``data`` whose training split is long-tailed with imbalance ratio ``rho`` (test unchanged)."""
    keep = longtail_indices(data.train.y.numpy(), data.num_classes, rho, rng)
    out = dataclasses.replace(data, train=data.train.subset(keep))
    if data.natural_clients is not None:
        remap = -np.ones(len(data.train), dtype=np.int64)
        remap[keep] = np.arange(len(keep))
        out.natural_clients = [remap[c][remap[c] >= 0] for c in data.natural_clients]
    return out
