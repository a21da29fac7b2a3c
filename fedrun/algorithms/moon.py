"""MOON (Li, He & Song 2021): model-contrastive learning between the local, global and previous models.

L = CE + mu l_con, l_con = -log(e^{sim(z, z_g)/tau} / (e^{sim(z, z_g)/tau} + e^{sim(z, z_prev)/tau}))
(MOON eq. 3), per sample then averaged, sim = cosine. z is the representation fed to the classifier
(:mod:`fedrun.models.features`; in FedIMA's models the 128-d output of the linear projector), z_g comes
from w^t and z_prev from this client's previous local model, both frozen. Each client keeps its
previous local model (one parameter row per client; it starts as w^0).

Frozen passes on a model with BatchNorm run in eval mode, as MOON's code runs them (QinbinLi/MOON main.py
``train_net_fedcon``: ``global_net.eval()``, ``previous_net.eval()``): the running statistics
normalise, and the batch's statistics neither normalise nor update them. The global model's pass uses the
global statistics; the previous model's pass uses this client's current running statistics (fedrun keeps
no per-client statistics across rounds, and a client's copy starts each round from the global ones, as in
MOON's code where every local net loads the global state dict).

``variant=ima``: FedIMA's code averages the cosines over the batch *before* the exp, i.e. one l_con per
batch from mean cos(z, z_g) and mean cos(z, z_prev).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F

from fedrun.algorithms.base import AlgoParams, Batch, ClientContext
from fedrun.algorithms.fedavg import FedAvg
from fedrun.config.registry import ALGORITHMS, positive
from fedrun.config.schema import FLConfig
from fedrun.core.tree import Tensors, Tree, clone
from fedrun.models.base import FunctionalModel, masked_mean
from fedrun.models.features import FeatureModel


@dataclass
class MoonParams(AlgoParams):
    """``mu``: contrastive weight (5 for CIFAR-10 in MOON; FedIMA hard-codes 5); ``tau`` = 0.5 (FedGAM)."""

    mu: float = 5.0  # model-contrastive weight (MOON paper for CIFAR-10: 5; FedIMA hard-codes 5)
    tau: float = 0.5  # temperature (FedGAM paper Sec. 5.1; MOON's default)
    variant: Literal["paper", "ima"] = "paper"  # paper | ima (FedIMA's code: cosines batch-averaged before the exp)

    def __post_init__(self) -> None:
        positive("mu", self.mu, allow_zero=True)
        positive("tau", self.tau)


def contrastive_loss(
    z: torch.Tensor, z_glob: torch.Tensor, z_prev: torch.Tensor, tau: float, batch_mean: bool = False
) -> torch.Tensor:
    """Per-sample l_con: cross-entropy with the global model's representation as the positive (index 0).

    ``batch_mean``: FedIMA's form, the cosines averaged over the batch first (one value per batch).
    """
    pos = F.cosine_similarity(z, z_glob, dim=-1) / tau
    neg = F.cosine_similarity(z, z_prev, dim=-1) / tau
    if batch_mean:
        pos, neg = pos.mean(), neg.mean()
    return -pos + torch.logsumexp(torch.stack([pos, neg], dim=-1), dim=-1)


@ALGORITHMS.register("moon", MoonParams)
class Moon(FedAvg):
    """Local loss CE + mu l_con; server as FedAvg."""

    stacks = True  # (tests/engines/test_stacked.py)

    hp: MoonParams

    def __init__(self, hp: MoonParams, fl: FLConfig, model: FunctionalModel) -> None:
        super().__init__(hp, fl, model)
        self.features = FeatureModel(model)

    def client_init(self, params: Tensors) -> Tree:
        return {"prev": clone(params)}

    def local_loss(self, params: Tensors, batch: Batch, ctx: ClientContext) -> torch.Tensor:
        buffers = batch.get("buffers")
        logits, z = self.features.forward(params, batch["x"], buffers)
        ce = F.cross_entropy(logits, batch["y"], reduction="none")
        if self.hp.mu == 0:
            return masked_mean(ce, batch.get("w"))
        z_glob = self.frozen(ctx.global_params, batch["x"], None if buffers is None else self.model.buffers)
        z_prev = self.frozen(ctx.state["prev"], batch["x"], buffers)
        if self.hp.variant == "ima":
            con = contrastive_loss(z, z_glob, z_prev, self.hp.tau, batch_mean=True)
            return masked_mean(ce, batch.get("w")) + self.hp.mu * con
        con = contrastive_loss(z, z_glob, z_prev, self.hp.tau)
        return masked_mean(ce + self.hp.mu * con, batch.get("w"))

    def frozen(self, params: Tensors, x: torch.Tensor, buffers: Tensors | None) -> torch.Tensor:
        """z of a frozen model: detached, in eval mode where the model has BatchNorm statistics (module docstring)."""
        if buffers is None:
            return self.features.features(params, x).detach()
        module = self.model.module
        was = module.training
        module.eval()
        try:
            return self.features.features(params, x, buffers).detach()
        finally:
            module.train(was)

    def client_finish(self, start: Tensors, end: Tensors, ctx: ClientContext, steps: torch.Tensor) -> tuple[Tree, Tree]:
        return {"params": end}, {**ctx.state, "prev": end}
