"""FedSMOO (Sun et al. 2023): SAM with a globally consistent perturbation plus FedDyn-style dual variables.

Following the authors' code (FL-Simulator client/fedsmoo.py, optimizer/DRegSAM.py, server/FedSMOO.py):
client step: g = grad f(w); g_hat = g - mu_i - s; eps = rho g_hat/||g_hat||; mu_i <- mu_i + eps - s;
direction = grad f(w + eps) + lam (h_i - w^t), clipped to norm ``max_norm``, then SGD with weight decay
``fl.weight_decay + lam`` (the lam w term). After training h_i <- h_i + (w_i - w^t); the client uploads w_i
and mu_i (two vectors). Server: s = rho mean_S mu_i / ||mean_S mu_i||, w^{t+1} = mean_S w_i + mean_N h_i.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedrun.algorithms.base import AlgoParams, Batch, ClientContext, RoundInfo, sgd_step
from fedrun.algorithms.fedavg import FedAvg
from fedrun.algorithms.fedsam import grad_at
from fedrun.config.registry import ALGORITHMS, positive
from fedrun.core.tree import Tensors, Tree, norm, tree_map, weighted_mean, zeros_like

DUAL_EPS = 1e-7


@dataclass
class FedSMOOParams(AlgoParams):
    """FL-Simulator defaults: ``rho`` = 0.1, ``lam`` = 0.1, ``max_norm`` = 10 (null: no clipping)."""

    rho: float = 0.1  # SAM radius (FL-Simulator, the authors' code)
    lam: float = 0.1  # dual/prox weight (FL-Simulator)
    max_norm: float | None = 10.0  # gradient clip in the client step (FL-Simulator: 10); None: no clipping

    def __post_init__(self) -> None:
        positive("rho", self.rho, allow_zero=True)
        positive("lam", self.lam, allow_zero=True)
        positive("max_norm", self.max_norm)


@ALGORITHMS.register("fedsmoo", FedSMOOParams)
class FedSMOO(FedAvg):
    """State: h_i, mu_i per client; s and mean_N h_i on the server (all start at 0)."""

    stacks = True  # (tests/engines/test_stacked.py)

    hp: FedSMOOParams

    def server_init(self, params: Tensors) -> Tree:
        return {"s": zeros_like(params), "h_mean": zeros_like(params)}

    def client_init(self, params: Tensors) -> Tree:
        return {"h": zeros_like(params), "mu": zeros_like(params)}

    def broadcast(self, params: Tensors, server_state: Tree) -> Tree:
        return {"s": server_state["s"]}

    def client_step(
        self, params: Tensors, opt: Tensors | None, batch: Batch, ctx: ClientContext
    ) -> tuple[Tensors, Tensors | None, Tree, torch.Tensor]:
        hp, fl, s = self.hp, self.fl, ctx.extras["s"]
        g, loss = self.local_grad(params, batch, ctx)
        g_hat = tree_map(lambda a, m, b: a - m - b, g, ctx.state["mu"], s)
        scale = hp.rho / (norm(g_hat) + DUAL_EPS)
        eps = tree_map(lambda a: a * scale, g_hat)
        mu = tree_map(lambda m, e, b: m + e - b, ctx.state["mu"], eps, s)
        g_sam = grad_at(self, params, eps, batch, ctx)
        direction = tree_map(lambda a, h, w0: a + hp.lam * (h - w0), g_sam, ctx.state["h"], ctx.global_params)
        params, opt = sgd_step(params, direction, opt, ctx.lr, fl.momentum, fl.weight_decay + hp.lam, hp.max_norm)
        return params, opt, {**ctx.state, "mu": mu}, loss

    def client_finish(self, start: Tensors, end: Tensors, ctx: ClientContext, steps: torch.Tensor) -> tuple[Tree, Tree]:
        h = tree_map(lambda h, w, w0: h + (w - w0), ctx.state["h"], end, start)
        return {"params": end, "mu": ctx.state["mu"]}, {**ctx.state, "h": h}

    def aggregate(
        self, params: Tensors, server_state: Tree, uploads: Tree, weights: torch.Tensor, info: RoundInfo
    ) -> tuple[Tensors, Tree, dict[str, float]]:
        m = weights.shape[0]
        uniform = torch.full((m,), 1.0 / m, dtype=weights.dtype, device=weights.device)
        mean_mu = weighted_mean(uploads["mu"], uniform)
        s = tree_map(lambda x: x * (self.hp.rho / (norm(mean_mu) + DUAL_EPS)), mean_mu)
        n = info.n_clients
        h_mean = tree_map(
            lambda hm, wi, w: hm + (wi - w.unsqueeze(0)).sum(0) / n, server_state["h_mean"], uploads["params"], params
        )
        mean_w = weighted_mean(uploads["params"], weights)
        new = tree_map(lambda a, hm: a + hm, mean_w, h_mean)
        return new, {**server_state, "s": s, "h_mean": h_mean}, {}
