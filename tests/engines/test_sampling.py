"""Cohort sampling and ``fl.train_all`` (FedLAW Alg. 1: all n clients train, the sampled m are aggregated)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
import torch

from fedrun.config.schema import FLConfig, RunSpec
from fedrun.core.tree import leaves
from fedrun.engines.base import CohortResult
from fedrun.engines.sampling import aggregated_part, sample_clients, training_clients
from fedrun.run.checkpoint import CHECKPOINT_FILE, load_checkpoint
from fedrun.run.loop import run

TINY = [
    "experiment=smoke",
    "data.max_train_samples=600",
    "data.max_test_samples=200",
    "fl.clients=4",
    "model.hidden=[16]",
    "fl.momentum=0.9",
    "fl.keep_momentum=true",
    "hardware.threads=1",
    "checkpoint.every=0",
    "checkpoint.keep_final=true",
]


def test_training_clients_and_the_aggregated_rows() -> None:
    sampled = torch.tensor([1, 3])
    assert torch.equal(training_clients(FLConfig(clients=5, participation=0.4), sampled), sampled)
    trained = training_clients(FLConfig(clients=5, participation=0.4, train_all=True), sampled)
    assert torch.equal(trained, torch.arange(5))
    res = CohortResult(
        uploads={"params": {"w": torch.arange(10.0).view(5, 2)}},
        states={"s": torch.zeros(5)},
        steps=torch.tensor([3, 4, 5, 6, 7]),
        samples=99,
        loss=0.5,
        client_loss=torch.tensor([0.1, 0.2, 0.3, 0.4, 0.5], dtype=torch.float64),
    )
    part = aggregated_part(res, trained, sampled)
    assert part.uploads["params"]["w"].tolist() == [[2.0, 3.0], [6.0, 7.0]]
    assert part.steps.tolist() == [4, 6] and part.client_loss.tolist() == [0.2, 0.4]
    assert (part.samples, part.loss) == (99, 0.5)  # what was trained, all of it
    assert aggregated_part(res, sampled, sampled) is res


def _run(make_spec: Callable[..., RunSpec], path: Path, rounds: int, *extra: str) -> tuple[pd.DataFrame, dict]:
    spec = make_spec(*TINY, f"fl.rounds={rounds}", *extra)
    path.mkdir()
    run(spec, path)
    return pd.read_csv(path / "metrics.csv"), load_checkpoint(path / CHECKPOINT_FILE).client_states


def test_train_all_trains_every_client_and_aggregates_the_sampled(
    make_spec: Callable[..., RunSpec], tmp_path: Path
) -> None:
    half = ("fl.participation=0.5",)
    assert len(sample_clients(make_spec(*TINY, *half).fl, 0, 0)) == 2
    every, every_states = _run(make_spec, tmp_path / "all", 1, *half, "fl.train_all=true")
    sampled, sampled_states = _run(make_spec, tmp_path / "sampled", 1, *half)
    full, full_states = _run(make_spec, tmp_path / "full", 1, "fl.participation=1.0")
    # round 1 aggregates the same two clients, trained from w^0 with zero momentum, in both half runs
    assert every["test_acc"].tolist() == sampled["test_acc"].tolist()
    assert every["test_acc"].tolist() != full["test_acc"].tolist()
    # all four downloaded the model, two uploaded theirs
    assert every["bytes_down"].tolist() == full["bytes_down"].tolist() == [2 * b for b in sampled["bytes_down"]]
    assert every["bytes_up"].tolist() == sampled["bytes_up"].tolist()
    # but every client trained: its kept momentum is that of a round where all four took part
    for a, b in zip(leaves(every_states), leaves(full_states), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    idle = [c for c in range(4) if c not in sample_clients(make_spec(*TINY, *half).fl, 0, 0)]
    mom = sampled_states["_momentum"]
    assert all(float(t[idle].abs().sum()) == 0 for t in mom.values())  # without train_all they never trained
    assert all(float(t[idle].abs().sum()) > 0 for t in every_states["_momentum"].values())


def test_train_all_with_full_participation_changes_nothing(make_spec: Callable[..., RunSpec], tmp_path: Path) -> None:
    a, _ = _run(make_spec, tmp_path / "a", 2)
    b, _ = _run(make_spec, tmp_path / "b", 2, "fl.train_all=true")
    assert a["test_acc"].tolist() == b["test_acc"].tolist()


@pytest.mark.parametrize("seed", [0, 1])
def test_sampling_is_keyed_by_seed_and_round(seed: int) -> None:
    fl = FLConfig(clients=10, participation=0.3)
    assert sample_clients(fl, seed, 2).tolist() == sample_clients(fl, seed, 2).tolist()
    assert len(sample_clients(fl, seed, 2)) == 3
