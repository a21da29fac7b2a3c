"""FedDyn (Acar et al. 2021): a dynamic regulariser makes the local optima consistent with the global one.

Local loss f_i(w) - <g_i, w> + (alpha/2) ||w - w^t||^2 (FedDyn Alg. 1); after training
g_i <- g_i - alpha (w_i - w^t). Server: h <- h - (alpha/N) sum_S (w_i - w^t), w^{t+1} = mean_S w_i - h/alpha.
The mean uses ``fl.weighting`` (uniform in the paper). g_i is kept per client, h on the server.

``variant=law``: FedLAW's code (client_funct.client_feddyn, server_funct.feddyn) uses the unsquared
(alpha/2) ||w - w^t||_2 and h <- h - alpha sum_S p_i (w_i - w^t) (size-weighted, no 1/N).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from fedrun.algorithms.base import AlgoParams, Batch, ClientContext, RoundInfo
from fedrun.algorithms.fedavg import FedAvg
from fedrun.registry import ALGORITHMS, positive
from fedrun.tree import Tensors, Tree, dot, sq_norm, sub, tree_map, weighted_mean, zeros_like


@dataclass
class FedDynParams(AlgoParams):
    """``alpha``: regularisation strength (FedLAW used 0.01; FedDyn paper grid {0.1, 0.01, 0.001})."""

    alpha: float = 0.01
    variant: Literal["paper", "law"] = "paper"

    def __post_init__(self) -> None:
        positive("alpha", self.alpha)


@ALGORITHMS.register("feddyn", FedDynParams)
class FedDyn(FedAvg):
    """Linear term -<g_i, w> plus a prox term; the server corrects the average by -h/alpha."""

    hp: FedDynParams

    def server_init(self, params: Tensors) -> Tree:
        return {"h": zeros_like(params)}

    def client_init(self, params: Tensors) -> Tree:
        return {"grad": zeros_like(params)}

    def local_loss(self, params: Tensors, batch: Batch, ctx: ClientContext) -> torch.Tensor:
        loss = super().local_loss(params, batch, ctx)
        lin = dot(ctx.state["grad"], params)
        diff = sub(params, ctx.global_params)
        if self.hp.variant == "law":  # vector_norm's gradient is 0 (not NaN) at w = w^t
            dist = torch.linalg.vector_norm(torch.cat([d.reshape(-1) for d in diff.values()]))
        else:
            dist = sq_norm(diff)
        return loss - lin + 0.5 * self.hp.alpha * dist

    def client_finish(self, start: Tensors, end: Tensors, ctx: ClientContext, steps: torch.Tensor) -> tuple[Tree, Tree]:
        a = self.hp.alpha
        grad = tree_map(lambda g, w, w0: g - a * (w - w0), ctx.state["grad"], end, start)
        return {"params": end}, {**ctx.state, "grad": grad}

    def aggregate(
        self, params: Tensors, server_state: Tree, uploads: Tree, weights: torch.Tensor, info: RoundInfo
    ) -> tuple[Tensors, Tree, dict[str, float]]:
        a, n = self.hp.alpha, info.n_clients
        if self.hp.variant == "law":
            step = tree_map(lambda d: a * d, self.mean_delta(params, uploads, weights))
        else:
            step = tree_map(lambda wi, w: (a / n) * (wi - w.unsqueeze(0)).sum(0), uploads["params"], params)
        h = tree_map(lambda h, s: h - s, server_state["h"], step)
        mean_w = weighted_mean(uploads["params"], weights)
        return tree_map(lambda m, hh: m - hh / a, mean_w, h), {**server_state, "h": h}, {}
