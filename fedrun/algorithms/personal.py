"""The shared machinery of the personalised methods that split the model into shared and personal parts.

Which parameters are personal is declared once, by the model (``FunctionalModel.head_keys``: its last layer,
or the layers ``algorithm.head`` names), and chosen by the method: FedPer and FedRep keep the head, LG-FedAvg
the body, FedBN the BatchNorm layers, Local-only everything. A client's personal parameters are its client
state (``{"personal": {name: tensor}}``: only the personal parts are stored per client, and they stack,
``vmap`` and checkpoint like every client state, so they survive a kill and resume bit for bit). Each local
step trains w = {shared parts of w^t as trained so far, the client's personal parts}, the client uploads the
shared parts only, and the server averages them (the personal parts of the global model stay as they were).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedrun.algorithms.base import AlgoParams, Batch, ClientContext, RoundInfo, sgd_step
from fedrun.algorithms.fedavg import FedAvg
from fedrun.config.schema import FLConfig
from fedrun.core.errors import ConfigError
from fedrun.core.tree import Tensors, Tree, nbytes, weighted_mean
from fedrun.models.base import FunctionalModel


@dataclass
class HeadParams(AlgoParams):
    """``head``: the layers (module names) of the head; None: the model's declaration, its last layer."""

    head: list[str] | None = None  # the head's layers (module names, e.g. [fc]); null: the model's last layer


class SplitModel(FedAvg):
    """A method whose clients keep ``self.private`` (parameter names) local and share the rest.

    Subclasses set ``private`` in ``__init__`` (through :meth:`keep`) and may mask each step's update
    (:meth:`trainable`: FedRep's alternation, FedBABU's frozen head).
    """

    personal = True

    def __init__(self, hp: AlgoParams, fl: FLConfig, model: FunctionalModel) -> None:
        super().__init__(hp, fl, model)
        self.private: list[str] = []
        self.shared: list[str] = [k for k, _ in model.module.named_parameters()]

    def keep(self, private: list[str]) -> None:
        """Make ``private`` the personal parameters (the rest shared)."""
        names = [k for k, _ in self.model.module.named_parameters()]
        self.private = [k for k in names if k in set(private)]
        self.shared = [k for k in names if k not in set(private)]

    def keep_split(self, private: list[str], personal: str, shared: str) -> None:
        """:meth:`keep`, refusing a split with an empty side in one line naming ``algorithm.head``: with nothing
        shared the method is local training, with nothing personal it is FedAvg, and neither says so."""
        self.keep(private)
        layers = ", ".join(self.model.layers())
        for side, keys, other in ((personal, self.private, "FedAvg"), (shared, self.shared, "algorithm=local")):
            if not keys:
                raise ConfigError(
                    "algorithm.head",
                    f"the split leaves the {side} empty (that is {other}); valid: a split with layers on both"
                    f" sides, of {layers}",
                )

    def client_init(self, params: Tensors) -> Tree:
        """Every client starts its personal parts from the initial model's."""
        return {"personal": {k: params[k].detach().clone() for k in self.private}}

    def trainable(self, w: Tensors, ctx: ClientContext) -> dict[str, torch.Tensor | bool]:
        """Which parameters this step updates (a bool, or a 0-d bool tensor under vmap): all of them."""
        return {k: True for k in w}

    def client_step(
        self, params: Tensors, opt: Tensors | None, batch: Batch, ctx: ClientContext
    ) -> tuple[Tensors, Tensors | None, Tree, torch.Tensor]:
        """One SGD step on w = {shared parts as trained so far, this client's personal parts}."""
        w = {**params, **ctx.state["personal"]}
        grads, loss = self.local_grad(w, batch, ctx)
        fl = self.fl
        new, new_opt = sgd_step(w, grads, opt, ctx.lr, fl.momentum, fl.weight_decay, fl.grad_clip)
        new, new_opt = self.masked(w, opt, new, new_opt, self.trainable(w, ctx))
        return new, new_opt, {**ctx.state, "personal": {k: new[k] for k in self.private}}, loss

    @staticmethod
    def masked(
        w: Tensors,
        opt: Tensors | None,
        new: Tensors,
        new_opt: Tensors | None,
        on: dict[str, torch.Tensor | bool],
    ) -> tuple[Tensors, Tensors | None]:
        """The step's result where ``on``, the parameters (and momentum) before it elsewhere: a frozen layer stays
        exactly as it was, as with requires_grad=False under torch.optim.SGD."""

        def pick(k: str, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            flag = on[k]
            if isinstance(flag, bool):
                return a if flag else b
            return torch.where(flag, a, b)

        out = {k: pick(k, new[k], w[k]) for k in w}
        if new_opt is None or opt is None:
            return out, new_opt
        return out, {k: pick(k, new_opt[k], opt[k]) for k in new_opt}

    def client_finish(self, start: Tensors, end: Tensors, ctx: ClientContext, steps: torch.Tensor) -> tuple[Tree, Tree]:
        """Uploads the shared parts only."""
        return {"params": {k: end[k] for k in self.shared}}, ctx.state

    def aggregate(
        self, params: Tensors, server_state: Tree, uploads: Tree, weights: torch.Tensor, info: RoundInfo
    ) -> tuple[Tensors, Tree, dict[str, float]]:
        """The shared parts: the weighted mean of the uploads (FedAvg); the personal parts of w stay."""
        if not self.shared:
            return params, server_state, {}
        return {**params, **weighted_mean(uploads["params"], weights)}, server_state, {}

    def personal_model(self, params: Tensors, client_state: Tree) -> Tensors:
        return {**params, **client_state["personal"]}

    def personal_keys(self) -> list[str] | None:
        return list(self.private) if self.personal else None

    def broadcast_bytes(self, params: Tensors, extras: Tree) -> int:
        """Only the shared parts are sent (a client has its personal parts)."""
        return nbytes({k: params[k] for k in self.shared}) + nbytes(extras)
