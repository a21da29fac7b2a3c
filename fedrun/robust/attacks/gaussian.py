"""Gaussian noise: an attacker sends a vector of N(mu, sigma^2 I) (Blanchard, El Mhamdi, Guerraoui and Stainer
2017, Sec. 5: Gaussian Byzantine vectors of standard deviation 200; FLTrust's "Gauss attack", Cao et al. 2021);
``mode=add`` adds that noise to its own update instead. The noise comes from the round's keyed generator
(:attr:`AttackView.generator`), never the global RNG."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from fedrun.config.registry import positive
from fedrun.robust.base import ATTACKS, AttackView, ModelAttack


@dataclass
class GaussianParams:
    """``mode``: ``replace`` sends N(mean, sigma^2 I); ``add`` adds that noise to the attacker's own update."""

    mode: Literal["replace", "add"] = "replace"  # Blanchard et al. 2017; FLTrust's Gauss attack
    mean: float = 0.0  # the noise's mean (Blanchard et al. 2017: 0)
    sigma: float = 200.0  # Blanchard et al. 2017 Sec. 5 and FLTrust: standard deviation 200

    def __post_init__(self) -> None:
        positive("sigma", self.sigma, allow_zero=True)


@ATTACKS.register("gaussian", GaussianParams)
class Gaussian(ModelAttack):
    name = "gaussian"
    hp: GaussianParams

    def __call__(self, own: torch.Tensor, honest: torch.Tensor | None, view: AttackView) -> torch.Tensor:
        if view.generator is None:
            raise ValueError("the gaussian attack needs a keyed generator (AttackView.generator)")
        noise = torch.randn(own.shape, generator=view.generator, dtype=own.dtype)  # on the generator's CPU
        noise = (noise * self.hp.sigma + self.hp.mean).to(own.device)
        return noise if self.hp.mode == "replace" else own + noise
