"""Ditto (Li et al. ICML 2021): a personal model pulled towards the global one.

Each client solves min_v F_i(v) + (lambda/2) ||v - w^t||^2 (eq. 2) beside its FedAvg update of w: at every local
step, on the same minibatch, w takes its SGD step and v a step on the personal objective (Algorithm 1, lines
6-8). The proximal part is taken implicitly,

    v <- (v - eta grad F_i(v) + eta lambda w^t) / (1 + eta lambda),

which equals the paper's explicit step to first order in eta lambda and stays stable for any lambda: lambda = 0
is local training of v, lambda -> infinity gives v = w^t (FedAvg's global model). The global model is FedAvg's,
whatever lambda.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedrun.algorithms.base import AlgoParams, Batch, ClientContext
from fedrun.algorithms.fedavg import FedAvg
from fedrun.config.registry import ALGORITHMS, positive
from fedrun.core import autodiff
from fedrun.core.tree import Tensors, Tree


@dataclass
class DittoParams(AlgoParams):
    """``lam``: lambda of eq. 2; the paper tunes it per data set (Sec. 5), 1.0 is fedrun's default."""

    lam: float = 1.0  # lambda in (lambda/2)||v - w^t||^2 (eq. 2; the paper tunes it per data set)

    def __post_init__(self) -> None:
        positive("lam", self.lam, allow_zero=True)


@ALGORITHMS.register("ditto", DittoParams)
class Ditto(FedAvg):
    """w: FedAvg; v (each client's state): SGD on F_i + (lambda/2)||v - w^t||^2, evaluated as the client's model."""

    hp: DittoParams
    personal = True

    def client_init(self, params: Tensors) -> Tree:
        return {"v": {k: t.detach().clone() for k, t in params.items()}}

    def client_step(
        self, params: Tensors, opt: Tensors | None, batch: Batch, ctx: ClientContext
    ) -> tuple[Tensors, Tensors | None, Tree, torch.Tensor]:
        w, opt, state, loss = super().client_step(params, opt, batch, ctx)
        v, eta, lam = ctx.state["v"], ctx.lr, self.hp.lam
        g = autodiff.grad(self.model.loss)(v, batch)
        v = {k: (v[k] - eta * g[k] + (eta * lam) * ctx.global_params[k]) / (1 + eta * lam) for k in v}
        return w, opt, {**state, "v": v}, loss

    def personal_model(self, params: Tensors, client_state: Tree) -> Tensors:
        return dict(client_state["v"])
