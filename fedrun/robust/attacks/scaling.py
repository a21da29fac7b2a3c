"""Scaling, model replacement (Bagdasaryan, Veit, Hua, Estrin and Shmatikov 2020, "How to backdoor federated
learning", AISTATS, eq. (3)): the attacker scales its update X - G^t by gamma = n / eta, so that the server's
G^t + (eta / n) sum_i (L_i - G^t) lands on its model X (the other updates cancelling out); with aggregation
weights p_i, gamma_i = 1 / (eta p_i). Behind a data attack (a backdoor) it replaces the global model by the
backdoored one."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedrun.config.registry import positive
from fedrun.robust.base import ATTACKS, AttackView, ModelAttack


@dataclass
class ScalingParams:
    """``gamma``: the scale; unset, 1 / (eta p_i) (n / eta with equal weights: Bagdasaryan et al. 2020 eq. (3))."""

    gamma: float | None = None  # None: n / eta (1 / (eta p_i) with aggregation weights p_i)

    def __post_init__(self) -> None:
        positive("gamma", self.gamma)


@ATTACKS.register("scaling", ScalingParams)
class Scaling(ModelAttack):
    name = "scaling"
    hp: ScalingParams

    def gammas(self, a: int, view: AttackView, dtype: torch.dtype) -> torch.Tensor:
        """Each attacker's scale [a]."""
        if self.hp.gamma is not None:
            return torch.full((a,), self.hp.gamma, dtype=dtype)
        p = view.weights.to(dtype) if view.weights is not None else torch.full((a,), 1.0 / view.n, dtype=dtype)
        return 1.0 / (view.server_lr * p)

    def __call__(self, own: torch.Tensor, honest: torch.Tensor | None, view: AttackView) -> torch.Tensor:
        return self.gammas(own.shape[0], view, own.dtype).to(own.device)[:, None] * own
