"""IID, Dirichlet and shards: coverage, measured skew, shard structure, failure instead of endless loops."""

from __future__ import annotations

import numpy as np
import pytest

from fedrun.core.errors import ConfigError
from fedrun.data.partition import class_counts, partition_stats
from fedrun.data.partitions.base import PartitionInput, PartitionParams
from fedrun.data.partitions.basic import DirichletParams, ShardsParams, dirichlet, iid, shards


def labels(n_per_class: int = 600, classes: int = 10, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).permutation(np.repeat(np.arange(classes), n_per_class))


def assert_exact_cover(parts: list[np.ndarray], n: int) -> None:
    allidx = np.concatenate(parts)
    assert len(allidx) == n, "some sample is missing or assigned twice"
    assert np.array_equal(np.sort(allidx), np.arange(n))


CASES = [
    (iid, PartitionParams()),
    (dirichlet, DirichletParams(alpha=0.5)),
    (dirichlet, DirichletParams(alpha=0.1, variant="no_resample")),
    (shards, ShardsParams(shards_per_client=2)),
    (shards, ShardsParams(shards_per_client=3)),
]


@pytest.mark.parametrize(("fn", "params"), CASES, ids=lambda v: getattr(v, "__name__", repr(v)))
def test_every_sample_assigned_exactly_once(fn, params) -> None:
    y = labels()
    parts = fn(PartitionInput(y, 10), 20, params, np.random.default_rng(1))
    assert len(parts) == 20
    assert_exact_cover(parts, len(y))


def test_partitions_are_pure_functions_of_the_seed() -> None:
    y = labels()
    a = dirichlet(PartitionInput(y, 10), 20, DirichletParams(alpha=0.3), np.random.default_rng(5))
    b = dirichlet(PartitionInput(y, 10), 20, DirichletParams(alpha=0.3), np.random.default_rng(5))
    c = dirichlet(PartitionInput(y, 10), 20, DirichletParams(alpha=0.3), np.random.default_rng(6))
    assert all(np.array_equal(x, z) for x, z in zip(a, b, strict=True))
    assert not all(np.array_equal(x, z) for x, z in zip(a, c, strict=True))


@pytest.mark.parametrize("variant", ["resample", "no_resample"])
def test_dirichlet_skew_grows_as_alpha_falls(variant: str) -> None:
    y = labels()
    tv = []
    for alpha in (100.0, 1.0, 0.1):
        per_seed = []
        for seed in range(3):
            p = DirichletParams(alpha=alpha, variant=variant, min_size=1)
            parts = dirichlet(PartitionInput(y, 10), 20, p, np.random.default_rng(seed))
            per_seed.append(partition_stats(class_counts(y, parts, 10))["mean_tv_to_global"])
        tv.append(np.mean(per_seed))
    assert tv[0] < 0.15, tv  # alpha=100 is close to IID
    assert tv[0] < tv[1] < tv[2], tv
    assert tv[2] > 0.5, tv


def test_dirichlet_resample_respects_min_size() -> None:
    y = labels()
    parts = dirichlet(PartitionInput(y, 10), 50, DirichletParams(alpha=0.1, min_size=10), np.random.default_rng(0))
    assert min(len(p) for p in parts) >= 10


def test_dirichlet_impossible_setting_fails_clearly_instead_of_looping() -> None:
    y = labels(n_per_class=30)  # 300 samples
    with pytest.raises(ConfigError, match="partition.alpha"):
        dirichlet(
            PartitionInput(y, 10), 100, DirichletParams(alpha=0.01, min_size=3, max_tries=20), np.random.default_rng(0)
        )
    with pytest.raises(ConfigError, match="min_size"):
        dirichlet(PartitionInput(y, 10), 100, DirichletParams(alpha=1.0, min_size=10), np.random.default_rng(0))


@pytest.mark.parametrize("k", [1, 2, 3])
def test_shards_give_k_label_groups_per_client(k: int) -> None:
    y = labels()  # 6000 samples; 20*k shards of 300/k... each shard lies inside one class
    parts = shards(PartitionInput(y, 10), 20, ShardsParams(shards_per_client=k), np.random.default_rng(0))
    order = np.argsort(y, kind="stable")
    shard_of = np.empty(len(y), dtype=int)
    for s, piece in enumerate(np.array_split(order, 20 * k)):
        shard_of[piece] = s
    for p in parts:
        assert len(np.unique(shard_of[p])) == k  # exactly k shards
        assert len(np.unique(y[p])) <= k  # so at most k labels
        assert len(p) == len(y) // 20
    # with shards inside single classes the k shards are k label groups: most clients see k distinct labels
    distinct = [len(np.unique(y[p])) for p in parts]
    assert np.mean([d == k for d in distinct]) > 0.5


def test_iid_sizes_equal() -> None:
    parts = iid(PartitionInput(labels(), 10), 7, PartitionParams(), np.random.default_rng(0))
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1
