"""FedNova (Wang et al. 2020): normalised averaging removes the bias of unequal local step counts.

With local momentum rho (``fl.momentum``) and tau_i steps, a_i = [tau_i - rho (1 - rho^tau_i)/(1 - rho)] / (1 - rho)
(a_i = tau_i for plain SGD; FedNova paper sec. 5 / FedIMA fednova_optimizer). Each client's normalised
update is d_i = (w^t - w_i) / a_i and the server takes w <- w - (sum_S p_i a_i) sum_S p_i d_i.

a_i is the norm of the local steps' sum only when the momentum buffer starts at zero each round, as in
the authors' code (FedIMA ``utils/optimizer.py`` lines 369-370 build a fresh ``torch.optim.SGD`` per round;
a_i at line 404). With ``fl.keep_momentum=true`` (every FedLAW preset sets it) the buffer carried in from
the last round adds to the update and a_i would mis-normalise it, so that combination is refused.
"""

from __future__ import annotations

import torch

from fedrun.algorithms.base import AlgoParams, RoundInfo
from fedrun.algorithms.fedavg import FedAvg
from fedrun.config.registry import ALGORITHMS
from fedrun.config.schema import FLConfig
from fedrun.core.errors import ConfigError
from fedrun.core.tree import Tensors, Tree, tree_map
from fedrun.models.base import FunctionalModel


def nova_a(steps: torch.Tensor, rho: float) -> torch.Tensor:
    """The norm a_i of the local step sum (the ``fl.momentum`` = rho case of FedNova's a_i)."""
    tau = steps.to(torch.float64)
    if rho == 0:
        return tau
    return (tau - rho * (1 - rho**tau) / (1 - rho)) / (1 - rho)


@ALGORITHMS.register("fednova", AlgoParams)
class FedNova(FedAvg):
    """Server: w <- w - tau_eff sum_S p_i (w^t - w_i)/a_i, tau_eff = sum_S p_i a_i (FedNova eq. 6)."""

    stacks = True  # (tests/engines/test_stacked.py)

    def __init__(self, hp: AlgoParams, fl: FLConfig, model: FunctionalModel) -> None:
        super().__init__(hp, fl, model)
        if fl.momentum >= 1:
            raise ConfigError("fl.momentum", f"FedNova needs momentum < 1, got {fl.momentum}")
        if fl.keep_momentum and fl.momentum:
            raise ConfigError(
                "fl.keep_momentum",
                "FedNova's a_i assumes the client momentum starts at 0 each round (the authors' code); valid: false",
            )

    def aggregate(
        self, params: Tensors, server_state: Tree, uploads: Tree, weights: torch.Tensor, info: RoundInfo
    ) -> tuple[Tensors, Tree, dict[str, float]]:
        a = nova_a(info.steps, self.fl.momentum).to(weights.device)
        p = weights.to(torch.float64)
        tau_eff = (p * a).sum()
        coef = (p * tau_eff / a.clamp_min(1e-12)).where(a > 0, torch.zeros_like(a))

        def combine(w: torch.Tensor, wi: torch.Tensor) -> torch.Tensor:
            c = coef.to(w.dtype).reshape((-1,) + (1,) * w.dim())
            return w - (c * (w.unsqueeze(0) - wi)).sum(0)

        return tree_map(combine, params, uploads["params"]), server_state, {"tau_eff": float(tau_eff)}
