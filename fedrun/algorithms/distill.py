"""Proxy-set baselines of FedLAW's Table 3: FedDF, FedBE and Server-FT. Clients are FedAvg's.

- ``feddf``    (Lin et al. 2020): student = the FedAvg model; for E_s epochs on the proxy set minimise
               KL(softmax(mean_j teacher_j logits) || softmax(student logits)) ("batchmean", T = 1), the
               teachers being the cohort's client models in eval mode.
- ``fedbe``    (Chen & Chao 2021): as FedDF with teachers = {FedAvg model, client models, one SWAG-Gaussian
               sample} (FedLAW code's ``SWAG_server``, 'gaussian', one sample; the original draws more).
- ``serverft`` FedAvg, then cross-entropy fine-tuning on the proxy set for E_s = 2 epochs.

FedLAW App. C: server optimiser Adam(betas (0.5, 0.999)), E_s = 100 (Server-FT 2), no temperature. Its
lr is not stated: the default is FedLAW's lr_s 0.005. ``optimizer=sgd`` is FedLAW code's distillation
optimiser (SGD, momentum 0.9, weight decay 5e-4, no decay; the code uses the clients' initial lr: set
``server_lr`` to it).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedrun.algorithms.base import AlgoParams, Batch, RoundInfo
from fedrun.algorithms.server_proxy import ProxyMethod, adam
from fedrun.config import one_of
from fedrun.registry import ALGORITHMS, in_range, positive
from fedrun.rng import torch_gen
from fedrun.tree import Tensors, Tree, unstack, weighted_mean


@dataclass
class DistillParams(AlgoParams):
    """``server_lr`` [?] (not stated; FedLAW's lr_s), ``server_epochs`` E_s (FedLAW App. C: 100)."""

    server_lr: float = 0.005
    server_epochs: int = 100
    optimizer: str = "adam"
    beta1: float = 0.5
    beta2: float = 0.999

    def __post_init__(self) -> None:
        positive("server_lr", self.server_lr)
        positive("server_epochs", self.server_epochs, allow_zero=True)
        one_of("optimizer", self.optimizer, ("adam", "sgd"))
        in_range("beta1", self.beta1, 0.0, 1.0)
        in_range("beta2", self.beta2, 0.0, 1.0)


@dataclass
class ServerFTParams(DistillParams):
    """Server-FT: E_s = 2 (FedLAW App. C: 100 epochs hurt it)."""

    server_epochs: int = 2


class ServerTrained(ProxyMethod):
    """FedAvg, then ``server_epochs`` epochs of training the global model on the proxy set."""

    hp: DistillParams

    def optimizer(self, tensors: list[torch.Tensor]) -> torch.optim.Optimizer:
        hp = self.hp
        if hp.optimizer == "adam":
            return adam(tensors, hp.server_lr, (hp.beta1, hp.beta2))
        return torch.optim.SGD(tensors, lr=hp.server_lr, momentum=0.9, weight_decay=5e-4)

    def server_loss(self, params: Tensors, batch: Batch, teachers: list[Tensors]) -> torch.Tensor:
        raise NotImplementedError

    def teachers(self, params: Tensors, models: Tensors, weights: torch.Tensor, info: RoundInfo) -> list[Tensors]:
        """The teacher models whose mean logits are distilled (none: plain fine-tuning)."""
        return []

    def aggregate(
        self, params: Tensors, server_state: Tree, uploads: Tree, weights: torch.Tensor, info: RoundInfo
    ) -> tuple[Tensors, Tree, dict[str, float]]:
        models = {k: w.detach() for k, w in uploads["params"].items()}
        student = {k: w.clone().requires_grad_(True) for k, w in weighted_mean(models, weights).items()}
        teachers = self.teachers(params, models, weights, info)
        opt = self.optimizer(list(student.values()))
        last = torch.tensor(float("nan"))
        with torch.enable_grad():
            for _, batches in self.proxy_epochs(info.round, self.hp.server_epochs):
                for batch in batches:
                    opt.zero_grad()
                    out = self.server_loss(student, batch, teachers)
                    out.backward()
                    opt.step()
                    last = out.detach()
        return {k: w.detach() for k, w in student.items()}, server_state, {"server_loss": float(last)}


@ALGORITHMS.register("serverft", ServerFTParams)
class ServerFT(ServerTrained):
    """FedAvg + cross-entropy fine-tuning on the proxy set (FedLAW's Server-FT baseline)."""

    def server_loss(self, params: Tensors, batch: Batch, teachers: list[Tensors]) -> torch.Tensor:
        return self.model.loss(params, batch)


@ALGORITHMS.register("feddf", DistillParams)
class FedDF(ServerTrained):
    """Ensemble distillation of the client models into the FedAvg model (Lin et al. 2020, Alg. 1)."""

    def teachers(self, params: Tensors, models: Tensors, weights: torch.Tensor, info: RoundInfo) -> list[Tensors]:
        return [unstack(models, i) for i in range(weights.shape[0])]

    def teacher_logits(self, teachers: list[Tensors], x: torch.Tensor) -> torch.Tensor:
        """Mean teacher logits on a batch, teachers in eval mode. Recomputed per batch as FedLAW's code
        does: the same forward as the student's, so a teacher equal to the student gives exactly zero KL
        gradient (a cached full-set forward differs in the last bits, which Adam would amplify)."""
        self.model.module.eval()
        with torch.no_grad():
            logits = sum(self.model.logits(t, x) for t in teachers) / len(teachers)
        self.model.module.train()
        return logits

    def server_loss(self, params: Tensors, batch: Batch, teachers: list[Tensors]) -> torch.Tensor:
        return kl_to_teacher(self.model.logits(params, batch["x"]), self.teacher_logits(teachers, batch["x"]))


@ALGORITHMS.register("fedbe", DistillParams)
class FedBE(FedDF):
    """FedDF with the FedAvg model and one SWAG-Gaussian sample added to the teachers (Chen & Chao 2021)."""

    def teachers(self, params: Tensors, models: Tensors, weights: torch.Tensor, info: RoundInfo) -> list[Tensors]:
        gen = torch_gen(self.env.get("seed", 0), "fedbe", info.round)
        clients = super().teachers(params, models, weights, info)
        return [weighted_mean(models, weights), *clients, swag_gaussian(params, models, gen)]


def kl_to_teacher(student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """KL(softmax(teacher) || softmax(student)), mean over the batch (``kl_div`` "batchmean", T = 1).

    Written as lse(s) - <p_t, s> + <p_t, log p_t>, so the gradient is exp(s - lse(s)) - p_t with p_t
    computed by the same expression: exactly 0 when the logits are equal. ``F.kl_div`` leaves a rounding
    residue there (sum p_t != 1 in floating point), which Adam's normalised step blows up to ~lr.
    """
    log_pt = teacher - teacher.logsumexp(1, keepdim=True)
    pt = log_pt.exp()
    return (student.logsumexp(1) - (pt * student).sum(1) + (pt * log_pt).sum(1)).mean()


def swag_gaussian(base: Tensors, models: Tensors, gen: torch.Generator) -> Tensors:
    """One SWAG-Gaussian model (FedLAW code ``SWAG_server.construct_models(mode='gaussian')``), per layer:

    u_i = Delta_i / ||Delta_i||, mu = mean_i u_i, var = clamp(mean_i u_i^2 - mu^2, 1e-5),
    sample = w^t + mean_i ||Delta_i|| * (mu + 0.1 * sqrt(var) * eps), eps ~ N(0, I).
    """
    out = {}
    for k, w in base.items():
        delta = (models[k] - w).flatten(1)
        norms = delta.norm(dim=1, keepdim=True)
        u = delta / norms.clamp_min(1e-12)
        mu = u.mean(0)
        var = (u.pow(2).mean(0) - mu.pow(2)).clamp_min(1e-5)
        eps = torch.randn(mu.shape, generator=gen, dtype=mu.dtype).to(mu.device)
        out[k] = w + (norms.mean() * (mu + 0.1 * var.sqrt() * eps)).reshape(w.shape)
    return out
