"""FedCos (FedCos paper): a cosine penalty aligns each local update with the global direction d^t.

Local loss: CE + mu (1 - cos theta), cos theta between w - w^t and d. Following the official code
(COS models/Update.penalty5) cos theta = (a + b - c) / (2 sqrt(a b + 1e-4)) with a = ||w - w^t||^2,
b = ||d||^2, c = ||w - w^t - d||^2, and the penalty is off while d = 0 (the first round). b is fixed for a round:
:meth:`FedCos.broadcast` computes it once with d (the same operations, so the same bits, as in the step), and it
is not counted as downloaded (a client computes it from d).
``direction``: ``paper`` d^t = w^t - w^{t-1}; ``code`` d = sum_S p_i w_i - w^{t-1}, taken before the server
rule (the two differ only under ``server=avgm``). Compositions from the paper's tables are options:
``prox_mu`` adds FedProx's term in the code's form prox_mu ||w - w^t||^2 (no 1/2); ``server`` = avg |
avgm (COS EMA form v <- beta v + (1-beta) Delta, v = Delta in the first round, w <- w + v) | opt
(w <- w + server_lr Delta, the paper's "FedOpt(1.5)").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from fedrun.algorithms.base import AlgoParams, Batch, ClientContext, RoundInfo
from fedrun.algorithms.fedavg import FedAvg
from fedrun.config.registry import ALGORITHMS, in_range, positive
from fedrun.core.tree import Tensors, Tree, nbytes, sq_norm, sub, tree_map, weighted_mean, zeros_like

COS_EPS = 1e-4


@dataclass
class FedCosParams(AlgoParams):
    """``mu``: penalty weight (paper: 0.01/0.02 cross-silo, 0.02/0.05 cross-device, 0.005/0.01 Shakespeare)."""

    mu: float = 0.02  # penalty weight (paper: 0.01/0.02 cross-silo, 0.02/0.05 cross-device, 0.005/0.01 Shakespeare)
    # paper: d = w^t - w^{t-1} | code: d = mean w_i - w^{t-1}, before the server rule (COS main_fed.py)
    direction: Literal["paper", "code"] = "paper"
    prox_mu: float = 0.0  # > 0 adds FedProx in COS's form prox_mu ||w - w^t||^2 (the paper used 0.1/0.01)
    # the server rule: avg | avgm (COS's EMA form, momentum server_momentum) | opt (w + server_lr Delta, "FedOpt(1.5)")
    server: Literal["avg", "avgm", "opt"] = "avg"
    server_momentum: float = 0.5  # beta of server=avgm (COS's EMA form)
    server_lr: float = 1.5  # eta_g of server=opt (FedCos's "FedOpt(1.5)")

    def __post_init__(self) -> None:
        positive("mu", self.mu, allow_zero=True)
        positive("prox_mu", self.prox_mu, allow_zero=True)
        # server=avgm: v <- beta v + (1 - beta) Delta from v = Delta^0 keeps the first round's update at beta = 1
        in_range(
            "server_momentum",
            self.server_momentum,
            0.0,
            1.0,
            hi_open=True,
            why="1 keeps the first round's update forever",
        )
        positive("server_lr", self.server_lr)


def cosine_penalty(params: Tensors, global_params: Tensors, d: Tensors, b: torch.Tensor | None = None) -> torch.Tensor:
    """1 - cos theta(w - w^t, d) in the code's eps form; 0 while ||d|| = 0. ``b``: ||d||^2 if already computed
    (it must be ``sq_norm(d)``: the round's constant, from :meth:`FedCos.broadcast`); None: computed here."""
    step = sub(params, global_params)
    a = sq_norm(step)
    if b is None:
        b = sq_norm(d)
    c = sq_norm(sub(step, d))
    cos = (a + b - c) / (2 * torch.sqrt(a * b + COS_EPS))
    return torch.where(b > 0, 1 - cos, torch.zeros_like(cos))


@ALGORITHMS.register("fedcos", FedCosParams)
class FedCos(FedAvg):
    """Clients minimise CE + mu (1 - cos(w - w^t, d^t)) (FedCos eq. 5); d^t is downloaded with w^t."""

    stacks = True  # (tests/engines/test_stacked.py)

    hp: FedCosParams

    def server_init(self, params: Tensors) -> Tree:
        return {"d": zeros_like(params), "v": zeros_like(params), "rounds": torch.zeros(())}

    def broadcast(self, params: Tensors, server_state: Tree) -> Tree:
        # b = ||d||^2 once per round, not at every local step (sq_norm(d), the penalty's own operations: same bits)
        d = server_state["d"]
        return {"d": d, "b": sq_norm(d)}

    def broadcast_bytes(self, params: Tensors, extras: Tree) -> int:
        """w^t and d: b = ||d||^2 is the client's own, computed from d (sent with it only in the simulation)."""
        return nbytes(params) + nbytes(extras["d"])

    def local_loss(self, params: Tensors, batch: Batch, ctx: ClientContext) -> torch.Tensor:
        loss = super().local_loss(params, batch, ctx)
        if self.hp.mu:
            # compiled (hardware.compile): b stays in the graph, where Inductor's fused reduction rounds it unlike
            # the eager sq_norm(d) of broadcast (measured: a compiled run's metrics changed in round 3)
            b = None if torch.compiler.is_compiling() else ctx.extras.get("b")
            loss = loss + self.hp.mu * cosine_penalty(params, ctx.global_params, ctx.extras["d"], b)
        if self.hp.prox_mu:
            loss = loss + self.hp.prox_mu * sq_norm(sub(params, ctx.global_params))
        return loss

    def aggregate(
        self, params: Tensors, server_state: Tree, uploads: Tree, weights: torch.Tensor, info: RoundInfo
    ) -> tuple[Tensors, Tree, dict[str, float]]:
        mean_w = weighted_mean(uploads["params"], weights)
        delta = sub(mean_w, params)
        state = {**server_state, "rounds": server_state["rounds"] + 1}
        hp = self.hp
        if hp.server == "avg":
            new = mean_w
        elif hp.server == "opt":
            new = tree_map(lambda w, d: w + hp.server_lr * d, params, delta)
        else:
            beta = hp.server_momentum if float(server_state["rounds"]) > 0 else 0.0
            state["v"] = tree_map(lambda v, d: beta * v + (1 - beta) * d, server_state["v"], delta)
            new = tree_map(lambda w, v: w + v, params, state["v"])
        state["d"] = delta if hp.direction == "code" else sub(new, params)
        return new, state, {}
