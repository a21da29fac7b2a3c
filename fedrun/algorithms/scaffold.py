"""SCAFFOLD, option II (Karimireddy et al. 2020): control variates correct client drift.

Clients descend g_i(y) - c_i + c; after K steps c_i+ = c_i - c + (w^t - y_K) / (K eta_l) (eq. 4, option
II) and upload (y_K, Delta c_i), two model-sized vectors. :class:`ControlVariates` is shared with
FedGAM-CV, whose server rule differs only in the step on c.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedrun.algorithms.base import AlgoParams, Algorithm, Batch, ClientContext, RoundInfo
from fedrun.algorithms.fedavg import FedAvg
from fedrun.config.registry import ALGORITHMS, positive
from fedrun.core.tree import Tensors, Tree, tree_map, weighted_mean, zeros_like


class ControlVariates(Algorithm):
    """c on the server, c_i per client (both start at 0); c is broadcast, (w_i, Delta c_i) uploaded."""

    def server_init(self, params: Tensors) -> Tree:
        return {"c": zeros_like(params)}

    def client_init(self, params: Tensors) -> Tree:
        return {"c_i": zeros_like(params)}

    def broadcast(self, params: Tensors, server_state: Tree) -> Tree:
        return {"c": server_state["c"]}

    def correct(self, grads: Tensors, ctx: ClientContext) -> Tensors:
        """g - c_i + c."""
        return tree_map(lambda g, ci, c: g - ci + c, grads, ctx.state["c_i"], ctx.extras["c"])

    def client_finish(self, start: Tensors, end: Tensors, ctx: ClientContext, steps: torch.Tensor) -> tuple[Tree, Tree]:
        """c_i+ = c_i - c + (w^t - y_K) / (K eta_l); uploads y_K and Delta c_i = c_i+ - c_i."""
        k_eta = steps.to(next(iter(start.values())).dtype).clamp_min(1.0) * ctx.lr
        c_new = tree_map(lambda ci, c, w0, w: ci - c + (w0 - w) / k_eta, ctx.state["c_i"], ctx.extras["c"], start, end)
        delta_c = tree_map(lambda a, b: a - b, c_new, ctx.state["c_i"])
        return {"params": end, "delta_c": delta_c}, {**ctx.state, "c_i": c_new}

    def c_step(self, info: RoundInfo) -> float:
        """Factor on mean_S Delta c_i in the server's c update."""
        raise NotImplementedError

    def update_c(self, server_state: Tree, uploads: Tree, info: RoundInfo) -> Tree:
        m = uploads["delta_c"][next(iter(uploads["delta_c"]))].shape[0]
        uniform = torch.full((m,), 1.0 / m, dtype=torch.float64)
        mean_dc = weighted_mean(uploads["delta_c"], uniform.to(next(iter(server_state["c"].values())).device))
        s = self.c_step(info)
        return {**server_state, "c": tree_map(lambda c, d: c + s * d, server_state["c"], mean_dc)}


@dataclass
class ScaffoldParams(AlgoParams):
    """``server_lr``: eta_g in w <- w + eta_g mean_S Delta y_i (SCAFFOLD paper; FL-Simulator default 1)."""

    server_lr: float = 1.0  # eta_g in w <- w + eta_g mean_S Delta y_i (SCAFFOLD paper's experiments; FL-Simulator 1)

    def __post_init__(self) -> None:
        positive("server_lr", self.server_lr)


@ALGORITHMS.register("scaffold", ScaffoldParams)
class Scaffold(ControlVariates, FedAvg):
    """Server: w <- w + eta_g sum_S p_i (y_i - w), c <- c + (m/N) mean_S Delta c_i (SCAFFOLD eq. 5)."""

    stacks = True  # (tests/engines/test_stacked.py)
    stack_scalars = ("server_lr",)

    hp: ScaffoldParams

    def local_grad(self, params: Tensors, batch: Batch, ctx: ClientContext) -> tuple[Tensors, torch.Tensor]:
        grads, loss = super().local_grad(params, batch, ctx)
        return self.correct(grads, ctx), loss

    def c_step(self, info: RoundInfo) -> float:
        return len(info.clients) / info.n_clients

    def aggregate(
        self, params: Tensors, server_state: Tree, uploads: Tree, weights: torch.Tensor, info: RoundInfo
    ) -> tuple[Tensors, Tree, dict[str, float]]:
        mean_w = weighted_mean(uploads["params"], weights)
        eta_g = self.hp.server_lr
        new = mean_w if eta_g == 1 else tree_map(lambda w, a: w + eta_g * (a - w), params, mean_w)
        return new, self.update_c(server_state, uploads, info), {}
