"""Nearest-neighbour mixing, NNM (Allouah, Farhadkhani, Guerraoui, Gupta, Pinot and Stephan 2023, "Fixing by
mixing: a recipe for optimal Byzantine ML under heterogeneity", AISTATS, Algorithm 1): each upload is replaced by
the average of its n - f nearest uploads (itself included), y_i = (1/(n-f)) sum_{j in N_i} x_j, and the defence
after it runs on the n mixtures with the same f. The neighbours come from one Gram product
(:func:`fedrun.robust.distances.sq_dists`); the mixtures are one [n, n] x [n, d] product. Mixture i stands for
client i: it keeps client i's aggregation weight. No setting (f comes with the round)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedrun.robust.base import PREAGGREGATORS, Mixed, PreAggregator, ServerView
from fedrun.robust.distances import sq_dists


@dataclass
class NNMParams:
    """No settings."""


def nnm_mix(x: torch.Tensor, f: int) -> torch.Tensor:
    """The NNM mixing matrix [n, n]: row i puts 1/(n - f) on the n - f uploads nearest to x_i (x_i included)."""
    n = x.shape[0]
    k = n - f
    if k < 1:
        raise ValueError(f"nnm needs f < n, got f={f} of {n}")
    d2 = sq_dists(x)
    d2.fill_diagonal_(-1.0)  # x_i is its own nearest, even against an exact duplicate
    idx = d2.topk(k, dim=1, largest=False).indices
    return torch.zeros(n, n, dtype=x.dtype, device=x.device).scatter_(1, idx, 1.0 / k)


@PREAGGREGATORS.register("nnm", NNMParams)
class NNM(PreAggregator):
    name = "nnm"

    def __call__(self, x: torch.Tensor, view: ServerView) -> Mixed:
        mix = nnm_mix(x, view.f)
        return Mixed(mix @ x, mix, view)
