"""APFL, adaptive personalised federated learning (Deng et al. 2020): a mixture of a local and the global model.

Each client keeps a local model v_i; its personalised model is v_bar = alpha v_i + (1 - alpha) w (eq. 3). At every
local step, on the same minibatch, the client's copy of w takes its FedAvg SGD step and v_i descends
grad_v f_i(alpha v_i + (1 - alpha) w) (Algorithm 1, lines 5-7, both at the step's start point). The server
averages w as FedAvg. A fixed alpha (the paper's experiments report several; its adaptive alpha, eq. 9, is not
implemented): alpha = 0 is FedAvg, alpha = 1 local training.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedrun.algorithms.base import AlgoParams, Batch, ClientContext
from fedrun.algorithms.fedavg import FedAvg
from fedrun.config.registry import ALGORITHMS, in_range
from fedrun.core import autodiff
from fedrun.core.tree import Tensors, Tree


@dataclass
class APFLParams(AlgoParams):
    """``alpha``: the mixing weight of the local model in v_bar = alpha v + (1 - alpha) w (eq. 3)."""

    alpha: float = 0.5  # weight of the local model in the personalised mixture (eq. 3); 0: FedAvg, 1: local

    def __post_init__(self) -> None:
        in_range("alpha", self.alpha, 0.0, 1.0)


@ALGORITHMS.register("apfl", APFLParams)
class APFL(FedAvg):
    """w: FedAvg; v_i (each client's state): SGD on f_i(alpha v_i + (1 - alpha) w)."""

    hp: APFLParams
    personal = True

    def client_init(self, params: Tensors) -> Tree:
        return {"v": {k: t.detach().clone() for k, t in params.items()}}

    def mix(self, v: Tensors, w: Tensors) -> Tensors:
        a = self.hp.alpha
        return {k: a * v[k] + (1 - a) * w[k] for k in w}

    def client_step(
        self, params: Tensors, opt: Tensors | None, batch: Batch, ctx: ClientContext
    ) -> tuple[Tensors, Tensors | None, Tree, torch.Tensor]:
        w, opt, state, loss = super().client_step(params, opt, batch, ctx)
        v = ctx.state["v"]
        g = autodiff.grad(lambda v_, w_, b: self.model.loss(self.mix(v_, w_), b))(v, params, batch)
        return w, opt, {**state, "v": {k: v[k] - ctx.lr * g[k] for k in v}}, loss

    def personal_model(self, params: Tensors, client_state: Tree) -> Tensors:
        return self.mix(client_state["v"], params)
