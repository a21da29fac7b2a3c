"""p_i of the round's aggregation (fedrun/run/rounds.py::aggregation_weights)."""

from __future__ import annotations

import torch

from fedrun.run.rounds import aggregation_weights


def test_size_and_uniform_weights() -> None:
    sizes = torch.tensor([1.0, 3.0], dtype=torch.float64)
    assert aggregation_weights(sizes, "size").tolist() == [0.25, 0.75]
    assert aggregation_weights(sizes, "uniform").tolist() == [0.5, 0.5]


def test_a_cohort_without_a_training_sample_is_weighted_uniformly_not_nan() -> None:
    # before: 0 / 0 = NaN weights, and the run stopped as diverged after its first aggregation (a natural
    # partition of FedProx's Synthetic data cut to 300 samples gave a one-client cohort holding none)
    sizes = torch.zeros(3, dtype=torch.float64)
    weights = aggregation_weights(sizes, "size")
    assert torch.isfinite(weights).all() and weights.tolist() == [1 / 3] * 3
