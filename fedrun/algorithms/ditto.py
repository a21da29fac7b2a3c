"""Ditto (Li et al. ICML 2021): a personal model pulled towards the global one.

Each client solves min_v F_i(v) + (lambda/2) ||v - w^t||^2 (eq. 2) beside its FedAvg update of w: at every local
step, on the same minibatch, w takes its SGD step and v a step on the personal objective (Algorithm 1, lines
6-8), by default the paper's explicit gradient step (``prox=explicit``; the authors' ``trainers_MTL/ditto.py``
takes the same: ``eff_grad = grads + lam * (v - w_global)``, ``v - learning_rate * eff_grad``):

    v <- v - eta (grad F_i(v) + lambda (v - w^t)).

``prox=implicit`` takes the proximal part implicitly,

    v <- (v - eta grad F_i(v) + eta lambda w^t) / (1 + eta lambda),

whose step is the explicit one divided by 1 + eta lambda (at lambda = 1, eta = 0.05: 4.8% shorter); it stays
stable for any lambda (lambda -> infinity gives v = w^t, FedAvg's global model), where the explicit step needs
eta lambda < 2. lambda = 0 is local training of v in both. The global model is FedAvg's, whatever lambda.
(fedrun took the implicit step before this option existed: its Ditto numbers of then are ``prox=implicit``'s.)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedrun.algorithms.base import AlgoParams, Batch, ClientContext
from fedrun.algorithms.fedavg import FedAvg
from fedrun.config.registry import ALGORITHMS, positive
from fedrun.config.schema import one_of
from fedrun.core import autodiff
from fedrun.core.tree import Tensors, Tree


@dataclass
class DittoParams(AlgoParams):
    """``lam``: lambda of eq. 2; the paper tunes it per data set (Sec. 5), 1.0 is fedrun's default."""

    lam: float = 1.0  # lambda in (lambda/2)||v - w^t||^2 (eq. 2; the paper tunes it per data set)
    prox: str = "explicit"  # explicit: the paper's (and code's) step | implicit: the prox term solved exactly

    def __post_init__(self) -> None:
        positive("lam", self.lam, allow_zero=True)
        one_of("prox", self.prox, ("explicit", "implicit"))


@ALGORITHMS.register("ditto", DittoParams)
class Ditto(FedAvg):
    """w: FedAvg; v (each client's state): SGD on F_i + (lambda/2)||v - w^t||^2, evaluated as the client's model."""

    stacks = True  # (tests/engines/test_stacked.py)
    stack_scalars = ("lam",)

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
        w0 = ctx.global_params
        if self.hp.prox == "implicit":
            v = {k: (v[k] - eta * g[k] + (eta * lam) * w0[k]) / (1 + eta * lam) for k in v}
        else:
            v = {k: v[k] - eta * (g[k] + lam * (v[k] - w0[k])) for k in v}
        return w, opt, {**state, "v": v}, loss

    def personal_model(self, params: Tensors, client_state: Tree) -> Tensors:
        return dict(client_state["v"])
