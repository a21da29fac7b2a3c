"""FedAvg with fixed global weight shrinking (FedLAW, Li et al. ICML 2023, Sec. 4.1, Tables 1 and 9).

The server shrinks the aggregate by a constant factor gamma:  w^{t+1} = gamma * sum_{i in S} p_i w_i
(eq. 3 with lambda = p and a fixed gamma; gamma < 1 acts like weight decay on the global model, gamma = 1
is FedAvg). As in :mod:`fedrun.algorithms.fedlaw`, every parameter is scaled, normalisation-layer affine
weights included. The adaptive variant that learns gamma on the proxy set is ``fedlaw_gamma``.

BatchNorm statistics: the clients' mean statistics describe the unshrunk client models, and used with the
shrunk one they mis-normalise every layer (the error compounds with depth). On a model with BatchNorm
statistics the server therefore re-estimates them for the aggregate on the proxy set (one train-mode pass,
cumulative average: ``torch.optim.swa_utils.update_bn``) for every gamma, gamma = 1 included: a table that
compares gammas then compares shrinking alone, not shrinking plus a change of statistics (re-estimated
statistics alone move a ResNet-8 round by points). Such runs need ``proxy.per_class`` > 0. The paper does not
say how its fixed-gamma runs (Table 1's ResNet-8) handled them, and the authors' fixed-gamma code is not
public (ZexiLee/ICML-2023-FedLAW has FedLAW and the baselines only). On a model without running statistics
gamma = 1 is FedAvg bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedrun.algorithms.base import AlgoParams, RoundInfo, SetupEnv
from fedrun.algorithms.fedavg import FedAvg
from fedrun.algorithms.server_proxy import proxy_epochs, reestimate_bn, require_proxy
from fedrun.config.registry import ALGORITHMS, positive
from fedrun.core.tree import Tensors, Tree, scale


@dataclass
class FedAvgGWSParams(AlgoParams):
    """``gamma``: the fixed shrinking factor (FedLAW Tables 1/9 sweep {1, .99, .97, .95, .93, .9}); 1 = FedAvg."""

    gamma: float = 1.0  # the fixed shrinking factor (FedLAW Tables 1/9 sweep 1, .99, .97, .95, .93, .9); 1 = FedAvg

    def __post_init__(self) -> None:
        positive("gamma", self.gamma)


@ALGORITHMS.register("fedavg_gws", FedAvgGWSParams)
class FedAvgGWS(FedAvg):
    """Clients as FedAvg; the server returns gamma times FedAvg's weighted mean (FedLAW eq. 3, fixed gamma)."""

    stacks = True  # (tests/engines/test_stacked.py)

    hp: FedAvgGWSParams

    def setup(self, env: SetupEnv) -> None:
        super().setup(env)
        # BatchNorm statistics are re-estimated for every gamma, 1 included (module docstring)
        self.owns_buffers = bool(self.model.buffers)
        if self.owns_buffers:
            self.proxy = require_proxy(env, "fedavg_gws on a BatchNorm model re-estimates its statistics")

    def aggregate(
        self, params: Tensors, server_state: Tree, uploads: Tree, weights: torch.Tensor, info: RoundInfo
    ) -> tuple[Tensors, Tree, dict[str, float]]:
        avg, server_state, diag = super().aggregate(params, server_state, uploads, weights, info)
        new = scale(avg, self.hp.gamma)
        if self.owns_buffers:
            _, batches = next(proxy_epochs(self.setup_env, self.proxy, info.round, 1))
            self.model.set_buffers(reestimate_bn(self.model, new, batches))
        return new, server_state, {**diag, "gamma": self.hp.gamma}
