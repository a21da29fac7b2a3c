"""Coordinate-wise trimmed mean (Yin, Chen, Ramchandran and Bartlett 2018, Definition 2): for each coordinate,
drop the k largest and the k smallest of the m values and average the m - 2k left, k = floor(beta m) with the
trimmed fraction beta < 1/2 at each end; robust when beta is at least the Byzantine fraction (their Theorem 4).

``beta`` unset trims k = f at each end, f the Byzantine count the server is set to tolerate (ByzFL's ``TrMean(f)``;
Fang et al. 2020 and FLTrust's experiments). Unweighted by definition. The middle values are read off one sort
of each coordinate's m values (exact: a sum less the extremes would lose the honest values to cancellation when
an attacker sends huge ones).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from fedrun.config.registry import in_range
from fedrun.robust.base import DEFENCES, Aggregate, Defence, ServerView
from fedrun.robust.defences.median import sorted_coordinates


@dataclass
class TrimmedMeanParams:
    """``beta``: the fraction trimmed at each end, in [0, 0.5) (Yin et al. 2018's beta); unset: f at each end."""

    beta: float | None = None  # Yin et al. 2018's beta; None: trim f at each end (ByzFL TrMean(f); Fang et al. 2020)

    def __post_init__(self) -> None:
        in_range("beta", self.beta, 0.0, 0.5, hi_open=True, why="trimming half at each end leaves no value")


def trimmed_mean(x: torch.Tensor, k: int) -> torch.Tensor:
    """The mean of each coordinate's middle m - 2k values of ``x`` [m, d] (k dropped at each end)."""
    m = x.shape[0]
    if not 0 <= 2 * k < m:
        raise ValueError(f"cannot trim {k} at each end of {m} values")
    if k == 0:
        return x.mean(dim=0)
    return sorted_coordinates(x)[:, k : m - k].mean(dim=1)


@DEFENCES.register("trimmed_mean", TrimmedMeanParams)
class TrimmedMean(Defence):
    name = "trimmed_mean"
    hp: TrimmedMeanParams

    def trim(self, m: int, f: int) -> int:
        """The values dropped at each end of a cohort of ``m`` with ``f`` Byzantine."""
        return f if self.hp.beta is None else math.floor(self.hp.beta * m + 1e-9)

    def refuse(self, n: int, f: int) -> str | None:
        k = self.trim(n, f)
        if 2 * k >= n:
            return f"trimmed_mean cannot trim {k} at each end of {n} uploads (needs at least {2 * k + 1})"
        if k < f:
            return f"trimmed_mean trims {k} at each end (beta={self.hp.beta}), fewer than the {f} Byzantine"
        return None

    def __call__(self, x: torch.Tensor, view: ServerView) -> Aggregate:
        return Aggregate(trimmed_mean(x, self.trim(x.shape[0], view.f)))
