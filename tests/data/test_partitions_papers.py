"""Defining properties of the papers' partitions (each construction's docstring in fedrun/data/partitions/ names its
source), on small synthetic label arrays."""

from __future__ import annotations

import numpy as np
import pytest

from fedrun.core.errors import ConfigError
from fedrun.data.partition import class_counts
from fedrun.data.partitions.base import PartitionInput
from fedrun.data.partitions.domains import DomainsParams, NaturalParams, domains, natural
from fedrun.data.partitions.label_skew import (
    DirichletEqualParams,
    HybridParams,
    LabelKParams,
    PctNonIIDParams,
    dirichlet_equal,
    hybrid,
    label_k,
    pct_noniid,
)
from fedrun.data.partitions.longtail import longtail_counts, longtail_indices
from fedrun.data.partitions.pachinko import PachinkoParams, pachinko


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def labels_balanced(per_class: int = 100, classes: int = 10, seed: int = 0) -> np.ndarray:
    return rng(seed).permutation(np.repeat(np.arange(classes), per_class))


def tv_to_global(counts: np.ndarray) -> np.ndarray:
    glob = counts.sum(0) / counts.sum()
    return 0.5 * np.abs(counts / counts.sum(1, keepdims=True) - glob).sum(1)


def assert_disjoint(parts: list[np.ndarray], n: int) -> None:
    allidx = np.concatenate(parts)
    assert len(np.unique(allidx)) == len(allidx)
    assert allidx.min() >= 0 and allidx.max() < n


@pytest.mark.parametrize("exhausted", ["redraw", "refill"])
def test_dirichlet_equal_exact_sizes(exhausted: str) -> None:
    y = labels_balanced(103)
    parts = dirichlet_equal(PartitionInput(y, 10), 7, DirichletEqualParams(alpha=0.3, exhausted=exhausted), rng())
    assert [len(p) for p in parts] == [1030 // 7] * 7
    if exhausted == "redraw":
        assert_disjoint(parts, len(y))
    # skewed: far from the global label distribution at alpha=0.3
    assert tv_to_global(class_counts(y, parts, 10)).mean() > 0.3


def test_dirichlet_equal_exhausted_classes() -> None:
    y = labels_balanced(50)  # 500 samples, 5 clients x 100, near one-hot priors: popular classes run out
    inp, p = PartitionInput(y, 10), DirichletEqualParams
    refill = class_counts(y, dirichlet_equal(inp, 5, p(alpha=0.01, exhausted="refill"), rng(1)), 10)
    redraw = class_counts(y, dirichlet_equal(inp, 5, p(alpha=0.01, exhausted="redraw"), rng(1)), 10)
    assert refill.sum(0).max() > 50  # refilled: a class is used more often than it has samples
    assert redraw.sum(0).max() <= 50  # redrawn: never


@pytest.mark.parametrize("iid_fraction", [0.0, 0.1, 0.3])
def test_pct_noniid_pool_share(iid_fraction: float) -> None:
    y = labels_balanced(100)
    n_clients = 10
    parts = pct_noniid(PartitionInput(y, 10), n_clients, PctNonIIDParams(iid_fraction=iid_fraction), rng())
    assert_disjoint(parts, len(y))
    assert sum(len(p) for p in parts) == len(y)
    # the pool = the first int(f * n_k) samples of each class in dataset order
    pool = np.concatenate([np.flatnonzero(y == k)[: int(iid_fraction * 100)] for k in range(10)])
    share = [np.isin(p, pool).sum() for p in parts]
    assert max(share) - min(share) <= 1 and sum(share) == len(pool)
    # the non-pool part of each client is one contiguous chunk of the label-sorted rest: <= 2 classes
    for p in parts:
        rest = p[~np.isin(p, pool)]
        assert len(np.unique(y[rest])) <= 2
    frac = np.mean([s / len(p) for s, p in zip(share, parts, strict=True)])
    assert frac == pytest.approx(iid_fraction, abs=0.01)


def test_hybrid_half_balanced_half_skewed() -> None:
    y = labels_balanced(400)
    parts = hybrid(PartitionInput(y, 10), 20, HybridParams(alpha1=10.0, alpha2=0.1), rng())
    assert_disjoint(parts, len(y))
    assert sum(len(p) for p in parts) == len(y)
    counts = class_counts(y, parts, 10)
    tv = tv_to_global(np.maximum(counts, 0) + 1e-12)
    assert tv[:10].max() < 0.2  # balanced clients 0-9 (alpha1 = 10)
    assert tv[10:].mean() > 0.5  # imbalanced clients 10-19 (alpha2 = 0.1)
    # the balanced half holds about half of the data (E[sum of 10 of 20 Dir(10) shares] = 1/2)
    assert 0.4 < counts[:10].sum() / counts.sum() < 0.6


def test_label_k_exactly_k_classes_split_evenly() -> None:
    y = labels_balanced(120)
    parts = label_k(PartitionInput(y, 10), 20, LabelKParams(k=3), rng())
    assert_disjoint(parts, len(y))
    counts = class_counts(y, parts, 10)
    assert ((counts > 0).sum(1) == 3).all()
    assert all(counts[j, j % 10] > 0 for j in range(20))  # client j holds class j mod C
    for k in range(10):
        held = counts[:, k][counts[:, k] > 0]
        assert held.max() - held.min() <= 1 and held.sum() == 120


def test_label_k_too_many_classes() -> None:
    with pytest.raises(ConfigError, match="partition.k"):
        label_k(PartitionInput(labels_balanced(10), 10), 5, LabelKParams(k=11), rng())


def cifar100_like(per_fine: int = 100) -> tuple[np.ndarray, np.ndarray]:
    fine = labels_balanced(per_fine, 100)
    coarse_of = rng(5).permutation(np.repeat(np.arange(20), 5))  # a random 20 x 5 hierarchy
    return fine, coarse_of[fine]


def test_pachinko_sizes_and_hierarchy() -> None:
    fine, coarse = cifar100_like()
    parts = pachinko(PartitionInput(fine, 100, coarse=coarse), 20, PachinkoParams(alpha=0.01, beta=10.0), rng())
    assert [len(p) for p in parts] == [500] * 20
    assert_disjoint(parts, len(fine))
    top_share, fines_in_top = [], []
    for p in parts:
        cc = np.bincount(coarse[p], minlength=20)
        top = cc.argmax()
        top_share.append(cc[top] / len(p))
        fines_in_top.append(len(np.unique(fine[p][coarse[p] == top])))
    # alpha=0.01: a client's samples come mostly from few superclasses ...
    assert np.mean(top_share) > 0.6
    # ... while beta=10 spreads them over that superclass's fine labels (5 per superclass)
    assert np.mean(fines_in_top) >= 4.5
    assert max(fines_in_top) <= 5


def test_pachinko_needs_coarse_labels() -> None:
    with pytest.raises(ConfigError, match="coarse"):
        pachinko(PartitionInput(labels_balanced(10), 10), 5, PachinkoParams(), rng())


def test_domains_clients_hold_only_their_domain() -> None:
    y = labels_balanced(150)
    dom = rng(3).integers(0, 5, len(y))
    for inner in ("label_k", "dirichlet", "shards", "iid"):
        parts = domains(PartitionInput(y, 10, domains=dom), 15, DomainsParams(inner=inner, min_size=1), rng())
        assert len(parts) == 15
        assert_disjoint(parts, len(y))
        for j, p in enumerate(parts):
            assert set(np.unique(dom[p])) == {j // 3}
    parts = domains(PartitionInput(y, 10, domains=dom), 10, DomainsParams(inner="label_k", k=2), rng())
    assert ((class_counts(y, parts, 10) > 0).sum(1) == 2).all()


def test_domains_impossible_combinations() -> None:
    y = labels_balanced(20)
    with pytest.raises(ConfigError, match="domain"):
        domains(PartitionInput(y, 10), 10, DomainsParams(), rng())
    dom = np.arange(len(y)) % 4
    with pytest.raises(ConfigError, match="fl.clients"):
        domains(PartitionInput(y, 10, domains=dom), 10, DomainsParams(clients_per_domain=3), rng())


def test_natural_partition() -> None:
    nat = [np.array([0, 1, 2]), np.array([3]), np.array([4, 5, 6, 7]), np.array([8, 9])]
    inp = PartitionInput(np.zeros(10, dtype=np.int64), 1, natural=nat)
    got = natural(inp, 4, NaturalParams(), rng())
    assert [p.tolist() for p in got] == [c.tolist() for c in nat]
    largest = natural(inp, 2, NaturalParams(choose="largest"), rng())
    assert [p.tolist() for p in largest] == [[0, 1, 2], [4, 5, 6, 7]]
    with pytest.raises(ConfigError, match="natural"):
        natural(PartitionInput(np.zeros(3, dtype=np.int64), 1), 2, NaturalParams(), rng())
    with pytest.raises(ConfigError, match="fl.clients"):
        natural(inp, 5, NaturalParams(), rng())


def test_longtail_counts_follow_rho() -> None:
    y = labels_balanced(1000)
    keep = longtail_indices(y, 10, 5.0, rng())
    counts = np.bincount(y[keep], minlength=10)
    expected = [int(1000 * (1 / 5.0) ** (k / 9)) for k in range(10)]
    assert counts.tolist() == expected
    assert counts[0] == 1000 and counts[-1] == 200  # head keeps all, tail keeps 1/rho
    assert longtail_counts(np.full(10, 1000), 1.0).tolist() == [1000] * 10
