"""FedLAW coherence / global-gradient norm and FedIMA client-global distances on constructed updates."""

from __future__ import annotations

import math

import pytest
import torch

from fedrun.metrics.diagnostics import coherence, distances_to_mean, round_diagnostics, update_gram


def _uploads(global_params: dict, deltas: list[dict]) -> dict:
    """Client models w_i = w + d_i stacked along a leading cohort dimension."""
    return {"params": {k: torch.stack([w + d[k] for d in deltas]) for k, w in global_params.items()}}


W = {"a": torch.tensor([1.0, 2.0, 3.0]), "b": torch.tensor([[0.5, -1.0], [2.0, 0.0]])}
D = {"a": torch.tensor([1.0, 0.0, -2.0]), "b": torch.tensor([[0.0, 3.0], [1.0, 1.0]])}
NEG = {k: -v for k, v in D.items()}
ORTH = {"a": torch.tensor([2.0, 1.0, 1.0]), "b": torch.zeros(2, 2)}  # <ORTH, D> = 2 - 2 = 0


def test_identical_updates_are_fully_coherent() -> None:
    gram = update_gram(W, _uploads(W, [D, D, D])["params"])
    assert coherence(gram) == pytest.approx(1.0)
    assert coherence(gram, torch.tensor([0.5, 0.3, 0.2])) == pytest.approx(1.0)


def test_opposite_updates_have_coherence_minus_one() -> None:
    assert coherence(update_gram(W, _uploads(W, [D, NEG])["params"])) == pytest.approx(-1.0)


def test_orthogonal_updates_have_zero_coherence_and_zero_updates_are_left_out() -> None:
    zero = {k: torch.zeros_like(v) for k, v in D.items()}
    assert coherence(update_gram(W, _uploads(W, [D, ORTH])["params"])) == pytest.approx(0.0, abs=1e-12)
    # two identical, one opposite: pairs (1,2)=1, (1,3)=(2,3)=-1 -> mean -1/3; a zero update changes nothing
    gram = update_gram(W, _uploads(W, [D, D, NEG, zero])["params"])
    assert coherence(gram) == pytest.approx(-1 / 3)
    assert math.isnan(coherence(update_gram(W, _uploads(W, [D, zero])["params"])))


def test_gram_and_distances_match_direct_computation() -> None:
    deltas = [D, NEG, ORTH]
    flat = torch.stack([torch.cat([d[k].flatten() for k in W]) for d in deltas]).double()
    gram = update_gram(W, _uploads(W, deltas)["params"])
    torch.testing.assert_close(gram, flat @ flat.T)
    p = torch.tensor([0.2, 0.3, 0.5], dtype=torch.float64)
    direct = (flat - p @ flat).norm(dim=1)
    torch.testing.assert_close(distances_to_mean(gram, p), direct)


def test_round_diagnostics_norms() -> None:
    deltas = [D, ORTH]
    out = round_diagnostics(W, _uploads(W, deltas), torch.tensor([0.5, 0.5]), torch.tensor([4, 6]), lr=0.1)
    mean = torch.cat([((D[k] + ORTH[k]) / 2).flatten() for k in W])
    assert out["global_update_norm"] == pytest.approx(float(mean.norm()), rel=1e-6)
    assert out["global_grad_norm"] == pytest.approx(float(mean.norm()) / (0.1 * 5), rel=1e-6)
    # two clients with equal weights: each lies half their difference away from the average
    half = float(torch.cat([((D[k] - ORTH[k]) / 2).flatten() for k in W]).norm())
    assert out["client_dist_mean"] == pytest.approx(half, rel=1e-6)
    assert out["client_dist_max"] == pytest.approx(half, rel=1e-6)
    assert out["grad_coherence"] == pytest.approx(0.0, abs=1e-9)
