"""FedCM (Xu et al. 2021): client momentum from the downloaded global update (FedSAM paper, sec. 2).

The server keeps last round's per-step pseudo-gradient Delta^t = -sum_S p_i (w_i - w^{t-1}) / (K eta_l)
and sends it with w^t (one extra vector down). Clients step along v = alpha g + (1 - alpha) Delta^t.
:class:`GlobalMomentum` holds that server side so MoFedSAM (``fedsam.py``) reuses it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedrun.algorithms.base import AlgoParams, Algorithm, Batch, ClientContext, RoundInfo
from fedrun.algorithms.fedavg import FedAvg
from fedrun.config.registry import ALGORITHMS, in_range, positive
from fedrun.core.tree import Tensors, Tree, tree_map, weighted_mean, zeros_like


@dataclass
class FedCMParams(AlgoParams):
    """``alpha``: weight of the local gradient (FL-Simulator default 0.1; 1 gives FedAvg).

    ``server_lr``: eta_g in w^{t+1} = w^t + eta_g sum_S p_i Delta_i (FedSAM paper: 1).
    """

    alpha: float = 0.1  # weight of the local gradient (FL-Simulator default 0.1; 1 gives FedAvg)
    server_lr: float = 1.0  # eta_g in w^{t+1} = w^t + eta_g sum_S p_i Delta_i (FedSAM paper: 1)

    def __post_init__(self) -> None:
        # v = alpha g + (1 - alpha) Delta^t with Delta^0 = 0: at alpha = 0 no client ever moves (1 is FedAvg)
        in_range("alpha", self.alpha, 0.0, 1.0, lo_open=True, why="0 leaves v = Delta^t = 0: the clients never move")
        positive("server_lr", self.server_lr)


class GlobalMomentum(Algorithm):
    """Server side shared by FedCM and MoFedSAM: keeps and broadcasts Delta^t (FedSAM paper eq. 6)."""

    def server_init(self, params: Tensors) -> Tree:
        return {"delta": zeros_like(params)}

    def broadcast(self, params: Tensors, server_state: Tree) -> Tree:
        return {"delta": server_state["delta"]}

    def momentum_direction(self, grads: Tensors, ctx: ClientContext) -> Tensors:
        """v = alpha g + (1 - alpha) Delta^t."""
        a = self.hp.alpha
        return tree_map(lambda g, d: a * g + (1 - a) * d, grads, ctx.extras["delta"])

    def aggregate(
        self, params: Tensors, server_state: Tree, uploads: Tree, weights: torch.Tensor, info: RoundInfo
    ) -> tuple[Tensors, Tree, dict[str, float]]:
        mean_w = weighted_mean(uploads["params"], weights)
        delta = tree_map(lambda a, w: a - w, mean_w, params)
        eta_g = self.hp.server_lr
        new = mean_w if eta_g == 1 else tree_map(lambda w, d: w + eta_g * d, params, delta)
        denom = info.steps.to(torch.float64).mean().clamp_min(1.0).item() * info.lr
        pseudo = tree_map(lambda d: -d / denom, delta) if denom > 0 else zeros_like(delta)
        return new, {**server_state, "delta": pseudo}, {}


@ALGORITHMS.register("fedcm", FedCMParams)
class FedCM(GlobalMomentum, FedAvg):
    """Local step w <- w - eta (alpha grad f_i(w) + (1 - alpha) Delta^t) (FedSAM paper, FedCM rule)."""

    stacks = True  # (tests/engines/test_stacked.py)

    hp: FedCMParams

    def local_grad(self, params: Tensors, batch: Batch, ctx: ClientContext) -> tuple[Tensors, torch.Tensor]:
        grads, loss = super().local_grad(params, batch, ctx)
        return self.momentum_direction(grads, ctx), loss
