"""FedRep (Collins et al. ICML 2021): a shared representation, a personal head, trained in alternation.

Each round a client first updates its personal head with the body frozen, then the body with the head frozen,
and uploads the body (Algorithm 1: tau_h head steps, then tau_phi body steps). The paper's code (lgcollins/FedRep,
``LocalUpdate.train``) runs ``local_ep`` epochs, the last ``local_rep_ep`` of them on the body and the ones before
on the head; here the round's local steps (``fl.local_epochs`` x ceil(n_i / B), or ``fl.local_steps``) end with
``rep_epochs`` epochs on the body and train the head before.

A round must leave the head at least one step: ``fl.local_epochs`` <= ``rep_epochs`` (fedrun's defaults, 1 and 1)
would train the body only, never the personal head, so it is refused in one line naming both keys, and so is a
``fl.local_steps`` that leaves some client no head step. The authors' scripts (``scripts/FedRep_*.sh``) run
``--local_ep 11 --local_rep_ep 1`` on CIFAR-10 with 2 shards (the paper's 10 head epochs and 1 body epoch) and
``--local_ep 15 --local_rep_ep 5`` elsewhere. A split with an empty body or head is refused (personal.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedrun.algorithms.base import Batch, ClientContext, SetupEnv
from fedrun.algorithms.personal import HeadParams, SplitModel
from fedrun.config.registry import ALGORITHMS, positive
from fedrun.config.schema import FLConfig
from fedrun.core.errors import ConfigError
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

    stacks = True  # (tests/engines/test_stacked.py)

    hp: FedRepParams

    def __init__(self, hp: FedRepParams, fl: FLConfig, model: FunctionalModel) -> None:
        super().__init__(hp, fl, model)
        self.keep_split(model.head_keys(hp.head), "personal head", "shared body")
        if fl.local_steps is None and fl.local_epochs <= hp.rep_epochs:
            raise ConfigError(
                "algorithm.rep_epochs",
                f"{hp.rep_epochs} of fl.local_epochs={fl.local_epochs} leaves the personal head no epoch; valid:"
                f" fl.local_epochs > algorithm.rep_epochs (the authors' CIFAR-10 script: fl.local_epochs=11 with 1)",
            )

    def setup(self, env: SetupEnv) -> None:
        """With ``fl.local_steps``: refuses a run in which some client's body epochs take every step."""
        super().setup(env)
        if self.fl.local_steps is None:
            return
        largest = int(env.data.sizes.max())
        body = self.hp.rep_epochs * -(-largest // self.fl.batch_size)
        if self.fl.local_steps <= body:
            raise ConfigError(
                "algorithm.rep_epochs",
                f"{self.hp.rep_epochs} body epoch(s) of the largest client ({largest} samples: {body} steps) take all"
                f" fl.local_steps={self.fl.local_steps}, leaving its head no step; valid: fl.local_steps > {body}",
            )

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
