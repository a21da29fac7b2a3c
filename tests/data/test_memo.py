"""Datasets loaded once per process (fedrun/data/memo.py): one read per key, a private copy per job."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import torch

from fedrun.data import memo
from fedrun.data.base import DataParams, Dataset, Split


@dataclass
class FakeParams(DataParams):
    size: int = 8


class Loader:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, p: FakeParams) -> Dataset:
        self.calls += 1
        x = torch.arange(p.size * 4, dtype=torch.uint8).reshape(p.size, 1, 2, 2)
        split = Split(x, torch.arange(p.size) % 2, domain=torch.zeros(p.size, dtype=torch.long))
        natural = [np.arange(p.size // 2), np.arange(p.size // 2, p.size)]
        return Dataset("fake", split, Split(x.clone(), split.y.clone()), 2, (1, 2, 2), natural_clients=natural)


@pytest.fixture(autouse=True)
def _empty_cache():
    memo.clear()
    yield
    memo.clear()


def test_one_read_per_source_whatever_the_per_run_subset() -> None:
    load = Loader()
    a = memo.load_source("fake", load, FakeParams(max_train_samples=4, longtail_rho=2.0))
    b = memo.load_source("fake", load, FakeParams(max_test_samples=3))
    assert load.calls == 1 and len(a.train) == len(b.train) == 8  # subsetting is the caller's job
    memo.load_source("fake", load, FakeParams(size=6))
    memo.load_source("fake", load, FakeParams(root="elsewhere"))
    assert load.calls == 3


def test_each_call_gets_a_private_copy() -> None:
    load = Loader()
    a = memo.load_source("fake", load, FakeParams())
    a.train.y[:] = 7
    a.train.x.zero_()
    a.natural_clients[0][:] = -1
    b = memo.load_source("fake", load, FakeParams())
    assert load.calls == 1
    assert b.train.y.tolist() == [0, 1] * 4 and int(b.train.x.max()) == 31 and b.natural_clients[0].min() == 0
    assert b.train.domain is not a.train.domain and b.train.domain.tolist() == [0] * 8


def test_least_recently_used_dropped_and_large_sets_not_kept(monkeypatch) -> None:
    load = Loader()
    for size in (2, 4, 6, 2):  # MAX_ENTRIES = 2: size 2 was dropped when 6 came in
        memo.load_source("fake", load, FakeParams(size=size))
    assert load.calls == 4
    monkeypatch.setattr(memo, "MAX_BYTES", 10)
    for _ in range(2):
        memo.load_source("fake", load, FakeParams(size=100))
    assert load.calls == 6


def test_a_failed_load_is_not_kept() -> None:
    def fail(p: FakeParams) -> Dataset:
        raise FileNotFoundError("no files")

    with pytest.raises(FileNotFoundError):
        memo.load_source("fake", fail, FakeParams())
    assert memo.load_source("fake", Loader(), FakeParams()).name == "fake"
