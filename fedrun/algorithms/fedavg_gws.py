"""FedAvg with fixed global weight shrinking (FedLAW, Li et al. ICML 2023, Sec. 4.1, Tables 1 and 9).

The server shrinks the aggregate by a constant factor gamma:  w^{t+1} = gamma * sum_{i in S} p_i w_i
(eq. 3 with lambda = p and a fixed gamma; gamma < 1 acts like weight decay on the global model, gamma = 1
is FedAvg). As in :mod:`fedrun.algorithms.fedlaw`, every parameter is scaled, normalisation-layer affine
weights included, and model buffers (BatchNorm running statistics, averaged by the runner) are not.
The adaptive variant that learns gamma on the proxy set is ``fedlaw_gamma``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedrun.algorithms.base import AlgoParams, RoundInfo
from fedrun.algorithms.fedavg import FedAvg
from fedrun.registry import ALGORITHMS, positive
from fedrun.tree import Tensors, Tree, scale


@dataclass
class FedAvgGWSParams(AlgoParams):
    """``gamma``: the fixed shrinking factor (FedLAW Tables 1/9 sweep {1, .99, .97, .95, .93, .9}); 1 = FedAvg."""

    gamma: float = 1.0

    def __post_init__(self) -> None:
        positive("gamma", self.gamma)


@ALGORITHMS.register("fedavg_gws", FedAvgGWSParams)
class FedAvgGWS(FedAvg):
    """Clients as FedAvg; the server returns gamma times FedAvg's weighted mean (FedLAW eq. 3, fixed gamma)."""

    hp: FedAvgGWSParams

    def aggregate(
        self, params: Tensors, server_state: Tree, uploads: Tree, weights: torch.Tensor, info: RoundInfo
    ) -> tuple[Tensors, Tree, dict[str, float]]:
        avg, server_state, diag = super().aggregate(params, server_state, uploads, weights, info)
        return scale(avg, self.hp.gamma), server_state, {**diag, "gamma": self.hp.gamma}
