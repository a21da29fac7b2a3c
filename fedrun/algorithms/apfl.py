"""APFL, adaptive personalised federated learning (Deng et al. 2020): a mixture of a local and the global model.

Each client keeps a local model v_i; its personalised model is v_bar = alpha v_i + (1 - alpha) w (eq. 3). At every
local step, on the same minibatch, the client's copy of w takes its FedAvg SGD step and v_i descends
grad_v f_i(alpha v_i + (1 - alpha) w) (Algorithm 1, lines 5-7, both at the step's start point). The server
averages w as FedAvg. A fixed alpha (the paper's experiments report several; its adaptive alpha, eq. 9, is not
implemented): alpha = 0 is FedAvg, alpha = 1 local training.

``form=code`` is the authors' FedTorch (``comms/trainings/federated/apfl.py``, ``utils/eval.py``
``inference_personal``): the personalised predictor mixes the two models' *outputs*,
alpha v(x) + (1 - alpha) w(x), in training and evaluation, and v's step is taken after w's, its gradient that of
CE(alpha v(x) + (1 - alpha) w'(x)) at the already-updated w'. For a model linear in its parameters (a logistic
regression) the two mixtures are the same function; alpha = 0 is FedAvg and alpha = 1 local training of v in
both forms.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from fedrun.algorithms.base import AlgoParams, Batch, ClientContext
from fedrun.algorithms.fedavg import FedAvg
from fedrun.config.registry import ALGORITHMS, in_range
from fedrun.config.schema import one_of
from fedrun.core import autodiff
from fedrun.core.tree import Tensors, Tree
from fedrun.models.base import masked_mean


@dataclass
class APFLParams(AlgoParams):
    """``alpha``: the mixing weight of the local model in v_bar = alpha v + (1 - alpha) w (eq. 3)."""

    alpha: float = 0.5  # weight of the local model in the personalised mixture (eq. 3); 0: FedAvg, 1: local
    form: str = "paper"  # paper: parameters mixed (eq. 3) | code: FedTorch's output mixture, v stepped after w

    def __post_init__(self) -> None:
        in_range("alpha", self.alpha, 0.0, 1.0)
        one_of("form", self.form, ("paper", "code"))


@ALGORITHMS.register("apfl", APFLParams)
class APFL(FedAvg):
    """w: FedAvg; v_i (each client's state): SGD on f_i(alpha v_i + (1 - alpha) w)."""

    stacks = True  # (tests/engines/test_stacked.py)

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
        if self.hp.form == "code":  # d/dv CE(alpha v(x) + (1 - alpha) w'(x)) at the updated w'
            fixed = {k: t.detach() for k, t in w.items()}
            g = autodiff.grad(lambda v_, b: self.own_loss(self.pair(v_, fixed), b))(v, batch)
        else:
            g = autodiff.grad(lambda v_, w_, b: self.model.loss(self.mix(v_, w_), b))(v, params, batch)
        return w, opt, {**state, "v": {k: v[k] - ctx.lr * g[k] for k in v}}, loss

    def personal_model(self, params: Tensors, client_state: Tree) -> Tensors:
        """paper: the mixed parameters; code: both models, their keys prefixed ``v/`` and ``w/``."""
        if self.hp.form == "code":
            return self.pair(client_state["v"], params)
        return self.mix(client_state["v"], params)

    @staticmethod
    def pair(v: Tensors, w: Tensors) -> Tensors:
        return {**{f"v/{k}": t for k, t in v.items()}, **{f"w/{k}": t for k, t in w.items()}}

    def own_logits(self, own: Tensors, x: torch.Tensor, buffers: Tensors | None = None) -> torch.Tensor:
        """code: alpha v(x) + (1 - alpha) w(x) (FedTorch ``inference_personal``); paper: the mixed model's."""
        if self.hp.form != "code":
            return super().own_logits(own, x, buffers)
        v = {k[2:]: t for k, t in own.items() if k.startswith("v/")}
        w = {k[2:]: t for k, t in own.items() if k.startswith("w/")}
        a = self.hp.alpha
        return a * self.model.logits(v, x, buffers) + (1 - a) * self.model.logits(w, x, buffers)

    def own_loss(self, own: Tensors, batch: Batch) -> torch.Tensor:
        if self.hp.form != "code":
            return super().own_loss(own, batch)
        logits = self.own_logits(own, batch["x"], batch.get("buffers"))  # type: ignore[arg-type]
        return masked_mean(F.cross_entropy(logits, batch["y"], reduction="none"), batch.get("w"))
