"""Norm bounding with weak differential privacy (Sun, Kairouz, Suresh and McMahan 2019, "Can you really backdoor
federated learning?", Sec. 4): each upload is clipped to norm at most M, x_i min(1, M / ||x_i||), the clipped
uploads are averaged with the aggregation weights p_i, and Gaussian noise N(0, sigma^2 I) is added to the
aggregate ("weak DP": a noise too small for a formal guarantee, enough to blunt a backdoor).

Defaults: M = 3 and sigma = 0.025, the EMNIST values of the paper (norm bounds 3, 5, 10 studied; sigma = 0.025
with M = 3 for weak DP) [values from the paper's text as read by the author of this module; check against the
paper before a reproduction]. ``sigma = 0`` is norm bounding alone (ByzFL's ``Clipping`` pre-aggregator then the
mean). The noise is drawn from the round's keyed generator (:attr:`ServerView.generator`), never the global RNG.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedrun.config.registry import positive
from fedrun.robust.base import DEFENCES, Aggregate, Defence, ServerView, finite_rows


@dataclass
class NormBoundParams:
    """``bound``: the norm bound M; ``sigma``: the std of the Gaussian noise on the aggregate (0: none)."""

    bound: float = 3.0  # M (Sun et al. 2019, EMNIST)
    sigma: float = 0.025  # weak DP noise std (Sun et al. 2019, EMNIST); 0: norm bounding alone

    def __post_init__(self) -> None:
        positive("bound", self.bound)
        positive("sigma", self.sigma, allow_zero=True)


def clip_factors(x: torch.Tensor, bound: float) -> torch.Tensor:
    """min(1, M / ||x_i||) for each row of ``x`` [m, d]."""
    return torch.div(bound, x.norm(dim=1).clamp_min(torch.finfo(x.dtype).tiny)).clamp(max=1.0)


def gaussian_noise(d: int, sigma: float, like: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """N(0, sigma^2 I_d) in ``like``'s dtype, drawn on the CPU from ``generator`` (required), on ``like``'s device."""
    if generator is None:
        raise ValueError("norm_bound's noise needs a keyed generator (ServerView.generator)")
    return (sigma * torch.randn(d, generator=generator, dtype=like.dtype)).to(like.device)


@DEFENCES.register("norm_bound", NormBoundParams)
class NormBound(Defence):
    name = "norm_bound"
    decides = True
    hp: NormBoundParams

    def __call__(self, x: torch.Tensor, view: ServerView) -> Aggregate:
        x, finite = finite_rows(x)
        weights = view.p(x) * clip_factors(x, self.hp.bound) * finite
        value = weights @ x
        if self.hp.sigma > 0:
            value = value + gaussian_noise(x.shape[1], self.hp.sigma, x, view.generator)
        return Aggregate(value, weights=weights)
