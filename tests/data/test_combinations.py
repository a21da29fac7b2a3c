"""Impossible data/partition/model combinations fail with one line naming the field (exit 2 from the CLI)."""

from __future__ import annotations

import pytest

from fedrun.core.errors import ConfigError
from fedrun.run.experiment import build_experiment
from tests.conftest import refused_in_one_line


def test_cli_pachinko_without_coarse_labels(tmp_path, monkeypatch, capsys) -> None:  # noqa: ANN001
    # `fedrun` through its console script's code path, in this process: exit 2, one line, no metrics written
    args = ["data=synthetic", "partition=pachinko", "model=mlp", "fl.rounds=1", f"cache_dir={tmp_path / 'cache'}"]
    refused_in_one_line(tmp_path, monkeypatch, capsys, args, "coarse")


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        (("data=fmnist", "partition=domains"), "partition.name"),
        (("data=fmnist", "partition=natural"), "partition.name"),
        (("data=synthetic", "partition=natural", "fl.clients=31"), "fl.clients"),
        (("data=synthetic", "partition=domains", "partition.clients_per_domain=2"), "fl.clients"),
        (("data=fmnist", "model=lstm"), "model.name"),
    ],
)
def test_impossible_combinations(make_spec, overrides: tuple[str, ...], field: str) -> None:  # noqa: ANN001
    with pytest.raises(ConfigError) as e:  # a model/data mismatch already while validating, before any file is read
        build_experiment(make_spec("data.max_train_samples=1000", "data.max_test_samples=100", *overrides))
    assert e.value.field == field
    assert "\n" not in str(e.value)


def test_natural_partition_on_synthetic(make_spec) -> None:  # noqa: ANN001
    exp = build_experiment(make_spec("data=synthetic", "partition=natural", "fl.clients=30"))
    assert sorted(len(p) for p in exp.parts) == sorted(len(c) for c in exp.data.natural_clients)
