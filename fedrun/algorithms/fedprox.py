"""FedProx (Li et al. 2020): a proximal term keeps local models near the global one."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedrun.algorithms.base import AlgoParams, Batch, ClientContext
from fedrun.algorithms.fedavg import FedAvg
from fedrun.config.registry import ALGORITHMS, positive
from fedrun.core.tree import Tensors


@dataclass
class FedProxParams(AlgoParams):
    """``mu``: proximal strength (FedIMA 0.01 from {0.1, 0.01, 0.001}; FedLAW 1e-3; FedGAM 0.1).

    ``half``: the paper's (mu/2)||w - w^t||^2 (default); false gives FedCos's code form mu||w - w^t||^2.
    """

    mu: float = 0.01  # proximal strength (FedIMA 0.01 from {0.1, 0.01, 0.001}; FedLAW 1e-3; FedGAM 0.1; FedCos 0.1)
    half: bool = True  # the paper's (mu/2)||w - w^t||^2; false: FedCos's code form mu ||w - w^t||^2

    def __post_init__(self) -> None:
        positive("mu", self.mu, allow_zero=True)


@ALGORITHMS.register("fedprox", FedProxParams)
class FedProx(FedAvg):
    """Local objective f_i(w) + (mu/2) ||w - w^t||^2 (FedProx paper, eq. 2); server as FedAvg."""

    stacks = True  # (tests/engines/test_stacked.py)
    stack_scalars = ("mu",)

    hp: FedProxParams
    steps_from_mean = True

    def local_loss(self, params: Tensors, batch: Batch, ctx: ClientContext) -> torch.Tensor:
        loss = super().local_loss(params, batch, ctx)
        prox = sum((params[k] - ctx.global_params[k]).pow(2).sum() for k in params)
        return loss + (0.5 if self.hp.half else 1.0) * self.hp.mu * prox
