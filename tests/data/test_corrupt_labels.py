"""Corrupted-label clients (FedLAW Table 8): how many, which, what changes, and what must not."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from fedrun.core.errors import ConfigError
from fedrun.data.corrupt import corrupted_clients
from fedrun.run.experiment import build_experiment
from fedrun.run.loop import run

SMALL = ("experiment=smoke", "data.max_train_samples=600", "data.max_test_samples=300", "hardware.threads=1")


@pytest.mark.parametrize(("n", "fraction"), [(20, 0.25), (20, 0.5), (20, 0.75), (10, 0.25), (7, 1.0), (9, 0.0)])
def test_round_fraction_n_distinct_clients_fixed_by_the_seed(n: int, fraction: float) -> None:
    ids = corrupted_clients(n, fraction, seed=8)
    assert len(ids) == round(fraction * n) == len(set(ids.tolist()))
    assert ids.min(initial=0) >= 0 and ids.max(initial=0) < n
    np.testing.assert_array_equal(corrupted_clients(n, fraction, seed=8), ids)


def test_other_seeds_pick_other_clients() -> None:
    picks = {tuple(corrupted_clients(20, 0.25, seed=s)) for s in range(8)}
    assert len(picks) > 1


def test_only_the_corrupted_clients_labels_a_and_b_are_swapped(make_spec) -> None:
    clean = build_experiment(make_spec(*SMALL))
    bad = build_experiment(make_spec(*SMALL, "corrupt.fraction=0.5", "corrupt.labels=[2,7]"))
    assert len(bad.corrupted) == 5 and len(clean.corrupted) == 0
    y0, y1 = clean.fed.train.y, bad.fed.train.y
    assert torch.equal(bad.data.train.y, y0)  # the loaded dataset is kept clean; only the clients' copy changes
    assert torch.equal(bad.fed.train.x, clean.fed.train.x)
    hit = torch.as_tensor(np.concatenate([bad.parts[c] for c in bad.corrupted]))
    rest = torch.as_tensor(np.concatenate([p for c, p in enumerate(bad.parts) if c not in set(bad.corrupted)]))
    assert torch.equal(y1[rest], y0[rest])
    expect = y0[hit].clone()
    expect[y0[hit] == 2], expect[y0[hit] == 7] = 7, 2
    assert torch.equal(y1[hit], expect)
    assert ((y0[hit] == 2) | (y0[hit] == 7)).any()  # the swap changed something
    assert torch.equal(bad.fed.test.y, clean.fed.test.y) and torch.equal(bad.fed.test.x, clean.fed.test.x)


def test_proxy_set_stays_clean(make_spec) -> None:
    clean = build_experiment(make_spec(*SMALL, "algorithm=serverft"))
    bad = build_experiment(make_spec(*SMALL, "algorithm=serverft", "corrupt.fraction=1.0", "corrupt.labels=[0,1]"))
    assert len(bad.corrupted) == 10
    assert torch.equal(bad.algorithm.proxy.split.y, clean.algorithm.proxy.split.y)


def test_recorded_in_partition_csv_and_summary(make_spec, tmp_path: Path) -> None:
    spec = make_spec(*SMALL, "corrupt.fraction=0.25", "corrupt.labels=[3,5]", "fl.rounds=1", "fl.local_steps=1")
    run(spec, tmp_path)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["corrupt_labels"] == [3, 5] and len(summary["corrupted_clients"]) == round(0.25 * 10)
    table = pd.read_csv(tmp_path / "partition.csv", index_col="client")
    assert table.index[table["corrupted"] == 1].tolist() == summary["corrupted_clients"]
    assert (table.filter(like="class_").sum(axis=1) == table["total"]).all()


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("corrupt.fraction=1.5", "corrupt.fraction"),
        ("corrupt.labels=[3,3]", "corrupt.labels"),
        ("corrupt.labels=[1]", "corrupt.labels"),
    ],
)
def test_bad_settings_name_the_field(make_spec, override: str, field: str) -> None:
    with pytest.raises(ConfigError) as e:
        make_spec(override)
    assert e.value.field == field and "\n" not in str(e.value)


def test_labels_outside_the_dataset_are_refused(make_spec) -> None:
    with pytest.raises(ConfigError) as e:
        build_experiment(make_spec(*SMALL, "corrupt.fraction=0.5", "corrupt.labels=[0,10]"))
    assert e.value.field == "corrupt.labels" and "valid: 0..9" in str(e.value)
