"""Run a configured partition with an on-disk cache, and describe the result (counts, heatmap, stats)."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from fedrun.data.base import Dataset
from fedrun.data.partitions.base import PartitionInput
from fedrun.errors import ConfigError
from fedrun.registry import PARTITIONS
from fedrun.rng import np_rng

CACHE_VERSION = 1


def partition_input(data: Dataset) -> PartitionInput:
    t = data.train
    to_np = lambda v: None if v is None else v.cpu().numpy()  # noqa: E731
    return PartitionInput(t.y.cpu().numpy(), data.num_classes, to_np(t.domain), to_np(t.coarse), data.natural_clients)


def cache_key(data: Dataset, name: str, params: Any, n_clients: int, seed: int) -> dict[str, Any]:
    """Everything the partition depends on; its hash names the cache file and it is re-checked on load."""
    labels = data.train.y.cpu().numpy()
    return {
        "version": CACHE_VERSION,
        "dataset": data.name,
        "n_train": int(len(labels)),
        "labels_sha1": hashlib.sha1(labels.tobytes()).hexdigest(),
        "partition": name,
        "params": asdict(params),
        "clients": n_clients,
        "seed": seed,
    }


def _load_cached(path: Path, key: dict[str, Any], n: int) -> list[np.ndarray] | None:
    try:
        with np.load(path, allow_pickle=False) as z:
            if json.loads(str(z["key"])) != key:
                return None
            idx, offsets = z["indices"], z["offsets"]
    except (OSError, ValueError, KeyError):
        return None
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        return None
    return [idx[offsets[i] : offsets[i + 1]] for i in range(len(offsets) - 1)]


def make_partition(
    data: Dataset, name: str, params: Any, n_clients: int, seed: int, cache_dir: str | None
) -> list[np.ndarray]:
    """The clients' index arrays into ``data.train`` (cached by dataset, partition config, clients, seed)."""
    fn = PARTITIONS.get(name).obj
    key = cache_key(data, name, params, n_clients, seed)
    path = None
    if cache_dir:
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]
        path = Path(cache_dir) / f"{data.name}-{name}-{digest}.npz"
        if path.is_file():
            cached = _load_cached(path, key, len(data.train))
            if cached is not None:
                return cached
    parts = fn(partition_input(data), n_clients, params, np_rng(seed, "partition"))
    if len(parts) != n_clients:
        raise ConfigError("fl.clients", f"partition {name} produced {len(parts)} clients, expected {n_clients}")
    parts = [np.asarray(p, dtype=np.int64) for p in parts]
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        offsets = np.concatenate([[0], np.cumsum([len(p) for p in parts])])
        tmp = path.with_name(path.name + f".{os.getpid()}.tmp.npz")
        np.savez(tmp, indices=np.concatenate(parts), offsets=offsets, key=json.dumps(key))
        os.replace(tmp, path)
    return parts


def class_counts(labels: np.ndarray, parts: list[np.ndarray], num_classes: int) -> np.ndarray:
    """[clients, classes] count matrix."""
    return np.stack([np.bincount(labels[p], minlength=num_classes) for p in parts])


def partition_stats(counts: np.ndarray) -> dict[str, float]:
    """Sizes, classes per client and the mean total-variation distance to the global label distribution."""
    sizes = counts.sum(1)
    glob = counts.sum(0) / max(1, counts.sum())
    local = counts / np.maximum(sizes[:, None], 1)
    tv = 0.5 * np.abs(local - glob).sum(1)
    return {
        "clients": int(len(sizes)),
        "size_min": int(sizes.min()),
        "size_median": float(np.median(sizes)),
        "size_max": int(sizes.max()),
        "classes_per_client": float((counts > 0).sum(1).mean()),
        "mean_tv_to_global": float(tv[sizes > 0].mean()) if (sizes > 0).any() else 0.0,
    }
