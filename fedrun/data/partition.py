"""Run a configured partition with an on-disk cache, and describe the result (counts, heatmap, stats)."""

from __future__ import annotations

import hashlib
import json
import zipfile
import zlib
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from fedrun.config.registry import PARTITIONS
from fedrun.core.errors import ConfigError
from fedrun.core.rng import np_rng
from fedrun.data.base import Dataset
from fedrun.data.partitions.base import PartitionInput
from fedrun.storage.cache import cache_file, write_cache

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


def valid_parts(indices: np.ndarray, offsets: np.ndarray, n_samples: int, n_clients: int) -> str | None:
    """Why a cached (indices, offsets) pair is not a partition of ``n_samples`` among ``n_clients`` (None when
    it is): integer arrays, one row per client (offsets 0 = o_0 <= ... <= o_n = len(indices)), every index in
    [0, n_samples) and held by one client only."""
    if indices.ndim != 1 or offsets.ndim != 1:
        return "indices and offsets must be 1-D"
    if not (np.issubdtype(indices.dtype, np.integer) and np.issubdtype(offsets.dtype, np.integer)):
        return f"integer arrays expected, got {indices.dtype} and {offsets.dtype}"
    if len(offsets) != n_clients + 1:
        return f"{len(offsets) - 1} clients, expected {n_clients}"
    if offsets[0] != 0 or offsets[-1] != len(indices) or (np.diff(offsets) < 0).any():
        return "offsets are not monotone from 0 to the number of indices"
    if indices.size and (indices.min() < 0 or indices.max() >= n_samples):
        return f"indices outside [0, {n_samples})"
    if len(np.unique(indices)) != len(indices):
        return "a sample is held by more than one client"
    return None


def _load_cached(path: Path, key: dict[str, Any], n: int, n_clients: int) -> list[np.ndarray] | None:
    """The cached partition, or None (recompute) when the file is unreadable, of another key, or invalid."""
    try:
        with np.load(path, allow_pickle=False) as z:
            if json.loads(str(z["key"])) != key:
                return None
            idx, offsets = z["indices"], z["offsets"]
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, zlib.error):  # truncated or foreign
        return None
    if valid_parts(idx, offsets, n, n_clients) is not None:
        return None
    idx = idx.astype(np.int64)
    return [idx[offsets[i] : offsets[i + 1]] for i in range(len(offsets) - 1)]


def make_partition(
    data: Dataset, name: str, params: Any, n_clients: int, seed: int, cache_dir: str | None
) -> list[np.ndarray]:
    """The clients' index arrays into ``data.train`` (cached by dataset, partition config, clients, seed).

    A cached file is used only when its key matches and it is a valid partition (:func:`valid_parts`); else the
    partition is recomputed and the file rewritten. A cache that cannot be written is a warning (fedrun.storage.cache).
    """
    fn = PARTITIONS.get(name).obj
    key = cache_key(data, name, params, n_clients, seed)
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]
    path = cache_file(cache_dir, f"{data.name}-{name}-{digest}.npz")
    if path is not None and path.is_file():
        cached = _load_cached(path, key, len(data.train), n_clients)
        if cached is not None:
            return check_federation(cached, name)
    parts = fn(partition_input(data), n_clients, params, np_rng(seed, "partition"))
    if len(parts) != n_clients:
        raise ConfigError("fl.clients", f"partition {name} produced {len(parts)} clients, expected {n_clients}")
    parts = check_federation([np.asarray(p, dtype=np.int64) for p in parts], name)
    if path is not None:
        offsets = np.concatenate([[0], np.cumsum([len(p) for p in parts])]).astype(np.int64)
        flat = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        write_cache(path, lambda tmp: np.savez(tmp, indices=flat, offsets=offsets, key=json.dumps(key)))
    return parts


def check_federation(parts: list[np.ndarray], name: str) -> list[np.ndarray]:
    """``parts``, refused when its clients hold fewer training samples than there are clients: a federation that
    cannot train (``partition=natural`` picks clients whose samples a subset cap, ``data.max_train_samples``,
    may have cut to none; every other partition gives each client a sample)."""
    held, empty = sum(len(p) for p in parts), sum(1 for p in parts if not len(p))
    if held < len(parts):
        raise ConfigError(
            "data.max_train_samples",
            f"the {len(parts)} clients of partition={name} hold {held} training samples ({empty} of them none),"
            " fewer than one per client; valid: a larger data.max_train_samples (or, for partition=natural,"
            " partition.choose=largest)",
        )
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


def domain_counts(domains: np.ndarray, parts: list[np.ndarray], n_domains: int) -> np.ndarray:
    """[clients, domains] count matrix."""
    return np.stack([np.bincount(domains[p], minlength=n_domains) for p in parts])


def domain_breakdown(
    labels: np.ndarray, domains: np.ndarray, parts: list[np.ndarray], num_classes: int, names: list[str] | None
) -> dict[str, dict[str, Any]]:
    """Per domain: its samples held by clients, the clients holding any of it, and the partition statistics
    (sizes, classes per client, mean TV to the domain's label distribution) of those clients' shares."""
    n_dom = int(max(domains.max() + 1, len(names or [])))
    names = names or [str(d) for d in range(n_dom)]
    out: dict[str, dict[str, Any]] = {}
    for d in range(n_dom):
        mine = [p[domains[p] == d] for p in parts]
        holders = [m for m in mine if len(m)]
        entry: dict[str, Any] = {"samples": int(sum(len(m) for m in mine)), "clients": len(holders)}
        if holders:
            counts = np.stack([np.bincount(labels[m], minlength=num_classes) for m in holders])
            stats = partition_stats(counts)
            stats.pop("clients")
            entry.update(stats)
        out[names[d]] = entry
    return out
