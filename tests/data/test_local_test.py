"""Local test splits (fedrun/data/local_test.py): disjoint from training data, reproducible, cached."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedrun.core.errors import ConfigError
from fedrun.data.local_test import (
    LocalTest,
    make_local_test,
    partition_test,
    partition_with_unseen,
    split_clients,
    warn_if_thin,
)


def _parts(rng: np.random.Generator, n: int = 600, k: int = 6) -> list[np.ndarray]:
    cuts = np.sort(rng.choice(np.arange(1, n), size=k - 1, replace=False))
    return [np.sort(p) for p in np.split(rng.permutation(n), cuts)]


def test_split_is_disjoint_complete_and_of_the_fraction() -> None:
    parts = _parts(np.random.default_rng(0))
    train, test = split_clients(parts, 0.25, seed=3)
    for p, tr, te in zip(parts, train, test, strict=True):
        assert not set(tr) & set(te)
        assert sorted(np.concatenate([tr, te])) == sorted(p)
        assert len(te) == min(max(round(0.25 * len(p)), 1), len(p) - 1)


def test_split_is_reproducible_and_keyed_per_client() -> None:
    parts = _parts(np.random.default_rng(0))
    a = split_clients(parts, 0.3, seed=1)[1]
    b = split_clients(parts, 0.3, seed=1)[1]
    c = split_clients(parts, 0.3, seed=2)[1]
    only_first = split_clients(parts[:1], 0.3, seed=1)[1]
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c, strict=True))
    assert np.array_equal(only_first[0], a[0])  # a client's split does not depend on the other clients


def test_a_client_of_one_sample_keeps_it_for_training() -> None:
    train, test = split_clients([np.array([7]), np.array([1, 2])], 0.9, seed=0)
    assert list(train[0]) == [7] and len(test[0]) == 0
    assert len(train[1]) == 1 and len(test[1]) == 1


def test_partition_deals_the_test_set_by_label_distribution() -> None:
    rng = np.random.default_rng(1)
    train_labels, test_labels = rng.integers(0, 3, 900), rng.integers(0, 3, 300)
    parts = [np.flatnonzero(train_labels == 0), np.flatnonzero(train_labels != 0)]  # client 0: class 0 only
    test = partition_test(train_labels, parts, test_labels, 3, seed=0)
    flat = np.concatenate(test)
    assert len(np.unique(flat)) == len(flat)  # each test sample to one client at most
    assert set(test_labels[test[0]]) == {0} and 0 not in set(test_labels[test[1]])
    assert len(flat) == len(test_labels)  # every class held by a client: the whole test split is dealt out


def test_make_local_test_caches_and_leaves_none_unchanged(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    parts = _parts(rng)
    labels, test_labels = rng.integers(0, 10, 600), rng.integers(0, 10, 200)
    same, none = make_local_test("none", 0.25, 0, parts, labels, test_labels, 10, str(tmp_path))
    assert same is parts and none is None
    train, local = make_local_test("split", 0.25, 0, parts, labels, test_labels, 10, str(tmp_path))
    assert local is not None and local.on_train
    assert len(list(tmp_path.glob("local-test-split-*.npz"))) == 1
    again, cached = make_local_test("split", 0.25, 0, parts, labels, test_labels, 10, str(tmp_path))
    assert all(np.array_equal(x, y) for x, y in zip(local.parts, cached.parts, strict=True))
    assert all(np.array_equal(x, y) for x, y in zip(train, again, strict=True))
    for tr, te in zip(train, local.parts, strict=True):
        assert not set(tr) & set(te)
    kept, part = make_local_test("partition", 0.25, 0, parts, labels, test_labels, 10, str(tmp_path))
    assert kept is parts and part is not None and not part.on_train


def _split_of(sizes: list[int]) -> LocalTest:
    return LocalTest("split", [np.arange(n) for n in sizes])


@pytest.mark.parametrize(
    ("sizes", "warned"),
    [([1, 1, 1, 1], True), ([0, 1, 1, 5], True), ([1, 1, 2, 2], False), ([2, 3, 4], False), ([], False)],
)
def test_local_test_splits_of_one_sample_warn_in_one_line(
    sizes: list[int], warned: bool, capsys: pytest.CaptureFixture
) -> None:
    warn_if_thin(_split_of(sizes))
    err = capsys.readouterr().err
    if warned:
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("fedrun: warning: eval.local_test: ")
        assert f"{sum(n <= 1 for n in sizes)} of {len(sizes)} clients" in err and "eval.local_test_fraction" in err
    else:
        assert err == ""
    warn_if_thin(LocalTest("partition", [np.arange(1)] * 3))
    assert "data.max_test_samples" in capsys.readouterr().err


def test_unseen_clients_the_partition_cannot_form_name_eval_unseen_clients() -> None:
    calls: list[tuple[int, str | None]] = []

    def make(n: int, cache: str | None) -> list[np.ndarray]:
        calls.append((n, cache))
        if n > 10:
            raise ConfigError("partition.min_size", f"{n} clients x min_size 10 exceed; valid: fewer")
        return [np.arange(1)] * n

    assert len(partition_with_unseen(make, 4, 2, "c")) == 6 and calls == [(6, "c")]
    calls.clear()
    with pytest.raises(ConfigError, match=r"^eval\.unseen_clients: 8 unseen clients with fl\.clients=4 make 12") as e:
        partition_with_unseen(make, 4, 8, "c")
    assert calls == [(12, "c"), (4, None)]  # the probe of fl.clients alone writes no cache
    assert "(partition.min_size: 12 clients x min_size 10 exceed)" in str(e.value) and str(e.value).count("valid:") == 1
    with pytest.raises(ConfigError, match=r"^partition\.min_size: 13 clients"):  # fl.clients alone too many
        partition_with_unseen(make, 12, 1, "c")
    with pytest.raises(ConfigError, match=r"^partition\.min_size: 11 clients"):  # no unseen clients: as it was
        partition_with_unseen(make, 11, 0, "c")
