"""Geometric median by the smoothed Weiszfeld algorithm: RFA, robust federated aggregation (Pillutla, Kakade and
Harchaoui 2022, "Robust aggregation for federated learning", IEEE TSP, Algorithm 2).

The weighted geometric median minimises sum_i alpha_i ||z - x_i|| (alpha_i: the aggregation weights p_i); each
Weiszfeld step is z <- sum_i beta_i x_i / sum_i beta_i with beta_i = alpha_i / max(nu, ||z - x_i||), the
smoothing nu keeping a step finite when z meets an upload. Defaults: the paper's R = 3 steps with nu = 1e-6 (its
experiments, as a secondary summary of the paper reports them; to check against its text), from the weighted
mean. The authors' code (krishnap25/RFA, ``geometric_median_update``) runs at most 4 steps with nu = 1e-5 and
stops early when the objective's relative change falls below 1e-6 (``iterations=4 nu=1e-5 ftol=1e-6``).
``init=zeros`` with ``ftol=0`` is Karimireddy et al.'s and ByzFL's variant (``GeometricMedian``: T steps from
z = 0, nu = 0.1). The last step's beta_i / sum beta_i are the weights each upload got
(:class:`~fedrun.robust.base.Aggregate`). Each step is one pass over the [m, d] uploads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from fedrun.config.registry import positive
from fedrun.robust.base import DEFENCES, Aggregate, Defence, ServerView, finite_rows


@dataclass
class GeoMedParams:
    """``iterations`` (R), ``nu`` (smoothing), ``init`` (weighted mean or zeros), ``ftol`` (early stop; 0: never)."""

    iterations: int = 3  # Weiszfeld steps R (the paper's experiments; RFA code: at most 4)
    nu: float = 1e-6  # smoothing nu (the paper; RFA code: 1e-5; ByzFL and Karimireddy et al.: 0.1)
    init: Literal["mean", "zeros"] = "mean"  # the weighted mean (RFA code); zeros: Karimireddy et al., ByzFL
    ftol: float = 0.0  # 0: always R steps (the paper; ByzFL); RFA code: stop when |obj' - obj| < 1e-6 obj

    def __post_init__(self) -> None:
        positive("iterations", self.iterations)
        positive("nu", self.nu)
        positive("ftol", self.ftol, allow_zero=True)


def geometric_median(x: torch.Tensor, alpha: torch.Tensor, hp: GeoMedParams) -> tuple[torch.Tensor, torch.Tensor]:
    """(the smoothed-Weiszfeld geometric median of the rows of ``x`` [m, d] with weights ``alpha`` [m], the last
    step's normalised weights beta [m]). Rows with a non-finite entry get weight 0."""
    x, finite = finite_rows(x)
    alpha = alpha * finite
    alpha = alpha / alpha.sum()
    z = alpha @ x if hp.init == "mean" else torch.zeros_like(x[0])
    beta = alpha
    dist = (x - z).norm(dim=1)
    for _ in range(hp.iterations):  # Weiszfeld steps, each one pass over the uploads
        beta = alpha / dist.clamp_min(hp.nu)
        beta = beta / beta.sum()
        z, prev = beta @ x, (alpha * dist).sum()
        dist = (x - z).norm(dim=1)
        obj = (alpha * dist).sum()
        if hp.ftol > 0 and bool((prev - obj).abs() < hp.ftol * obj):
            break
    return z, beta


@DEFENCES.register("geomed", GeoMedParams)
class GeoMed(Defence):
    name = "geomed"
    decides = True
    hp: GeoMedParams

    def min_uploads(self, f: int) -> int:
        return 2 * f + 1  # the geometric median's breakdown point is 1/2

    def __call__(self, x: torch.Tensor, view: ServerView) -> Aggregate:
        z, beta = geometric_median(x, view.p(x), self.hp)
        return Aggregate(z, weights=beta)
