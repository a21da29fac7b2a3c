"""FedRep (Collins et al. ICML 2021): a shared representation, a personal head, trained in alternation.

Each round a client first updates its personal head with the body frozen, then the body with the head frozen,
and uploads the body (Algorithm 1: tau_h head steps, then tau_phi body steps). The paper's code (lgcollins/FedRep,
``LocalUpdate.train``) runs ``local_ep`` epochs, the last ``local_rep_ep`` of them on the body and the ones before
on the head; here the round's local steps (``fl.local_epochs`` x ceil(n_i / B), or ``fl.local_steps``) end with
``rep_epochs`` epochs on the body and train the head before.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedrun.algorithms.base import Batch, ClientContext
from fedrun.algorithms.personal import HeadParams, SplitModel
from fedrun.config.registry import ALGORITHMS, positive
from fedrun.config.schema import FLConfig
from fedrun.core.tree import Tensors, Tree
from fedrun.models.base import FunctionalModel


@dataclass
class FedRepParams(HeadParams):
    """``rep_epochs``: the last epochs of a round, trained on the body (FedRep's code: local_rep_ep = 1)."""

    rep_epochs: int = 1  # epochs on the body at a round's end (FedRep code: local_rep_ep 1); the ones before: head

    def __post_init__(self) -> None:
        positive("rep_epochs", self.rep_epochs)


@ALGORITHMS.register("fedrep", FedRepParams)
class FedRep(SplitModel):
    """Head steps first (body frozen), then ``rep_epochs`` epochs of body steps (head frozen); body uploaded."""

    hp: FedRepParams

    def __init__(self, hp: FedRepParams, fl: FLConfig, model: FunctionalModel) -> None:
        super().__init__(hp, fl, model)
        self.keep(model.head_keys(hp.head))

    def client_init(self, params: Tensors) -> Tree:
        first = next(iter(params.values()))
        return {**super().client_init(params), "t": torch.zeros((), dtype=first.dtype, device=first.device)}

    def head_steps(self, ctx: ClientContext) -> torch.Tensor:
        """The round's head steps: all local steps but the last ``rep_epochs`` x ceil(n_i / B)."""
        if ctx.size is None:
            raise ValueError("FedRep needs the client's size n_i (ClientContext.size)")
        per_epoch = torch.ceil(ctx.size / self.fl.batch_size)
        total = self.fl.local_steps if self.fl.local_steps is not None else self.fl.local_epochs * per_epoch
        return torch.clamp(total - self.hp.rep_epochs * per_epoch, min=0)

    def trainable(self, w: Tensors, ctx: ClientContext) -> dict[str, torch.Tensor | bool]:
        on_head = ctx.state["t"] < self.head_steps(ctx)
        head = set(self.private)
        return {k: on_head if k in head else ~on_head for k in w}

    def client_step(
        self, params: Tensors, opt: Tensors | None, batch: Batch, ctx: ClientContext
    ) -> tuple[Tensors, Tensors | None, Tree, torch.Tensor]:
        w, opt, state, loss = super().client_step(params, opt, batch, ctx)
        return w, opt, {**state, "t": ctx.state["t"] + 1}, loss

    def client_finish(self, start: Tensors, end: Tensors, ctx: ClientContext, steps: torch.Tensor) -> tuple[Tree, Tree]:
        upload, state = super().client_finish(start, end, ctx, steps)
        return upload, {**state, "t": torch.zeros_like(ctx.state["t"])}
