"""Proxy-set baselines of FedLAW's Table 3: FedDF, FedBE and Server-FT. Clients are FedAvg's.

- ``feddf``    (Lin et al. 2020): student = the FedAvg model; for E_s epochs on the proxy set minimise
               KL(softmax(mean_j teacher_j logits) || softmax(student logits)) ("batchmean", T = 1), the
               teachers being the cohort's client models in eval mode.
- ``fedbe``    (Chen & Chao 2021): as FedDF with teachers = {FedAvg model, client models, one SWAG-Gaussian
               sample}, as FedLAW's code runs it (``server_funct.fedbe``). Its departures from FedBE's own
               paper, kept because Table 3 was produced this way: one SWAG sample (``concentrate_num=1``;
               FedBE draws several, e.g. 10, plus Dirichlet-weighted models), the teachers' *logits* are
               averaged (FedBE averages their softmax probabilities), and the student is the distilled model
               itself (FedBE's student keeps an SWA average of its weights during distillation).
- ``serverft`` FedAvg, then cross-entropy fine-tuning on the proxy set for E_s = 2 epochs.

FedLAW App. C: server optimiser Adam(betas (0.5, 0.999)), E_s = 100 (Server-FT 2), no temperature. Its
lr is not stated: the default is FedLAW's lr_s 0.005. A fresh Adam each round (as FedLAW's own server
optimisation). ``optimizer=sgd`` is what FedLAW's code runs for all three (``server_funct.py``
``server_finetune``, ``feddf``, ``fedbe`` step ``central_node.optimizer``): the central node's
``torch.optim.SGD`` from ``utils.py`` init_optimizer, momentum 0.9, weight decay ``args.local_wd_rate``
(``server_weight_decay``) and the clients' initial lr (``server_lr``), never decayed (``lr_scheduler`` only
touches the clients' optimisers), built once (``nodes.py`` line 32) so its momentum buffer carries over from
round to round; here it lives in the server state. FedLAW's table presets run this form
(fedrun/papers/targets.py LAW_SERVER_SGD).

BatchNorm statistics (the paper is silent; FedLAW's code decides, ``server_funct.py`` lines 289-307,
363-386, 757-795): the student starts from the FedAvg state dict, i.e. the size-weighted mean of the
clients' statistics, and its train-mode passes on the proxy set update them; the result is the new global
model's (this method owns the buffers). A client teacher runs in eval mode with its own uploaded statistics.
FedBE's FedAvg and SWAG teachers are fresh model copies the code never puts in eval mode: they normalise
with each proxy batch's own statistics (train mode; their running statistics are scratch copies).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from fedrun.algorithms.base import AlgoParams, Batch, RoundInfo, average_buffers
from fedrun.algorithms.server_proxy import ProxyMethod, adam
from fedrun.config.registry import ALGORITHMS, in_range, positive
from fedrun.config.schema import one_of
from fedrun.core.rng import torch_gen
from fedrun.core.tree import Tensors, Tree, clone, unstack, weighted_mean, zeros_like

SGD_MOMENTUM = 0.9  # FedLAW code's central optimiser (args.momentum)


class Teacher(NamedTuple):
    """A model whose logits are distilled: ``params``, and the BatchNorm statistics it normalises with in
    eval mode (``buffers``; None for a model without any), or, with ``batch_stats``, each batch's own."""

    params: Tensors
    buffers: Tensors | None = None
    batch_stats: bool = False


@dataclass
class DistillParams(AlgoParams):
    """``server_lr`` [?] (not stated; FedLAW's lr_s), ``server_epochs`` E_s (FedLAW App. C: 100);
    ``server_weight_decay``: the ``optimizer=sgd`` form's weight decay (FedLAW code: the clients' 5e-4)."""

    server_lr: float = 0.005  # the server's lr: not stated in FedLAW App. C [?]; FedLAW's lr_s 0.005
    server_epochs: int = 100  # E_s, epochs on the proxy set per round (FedLAW App. C: 100)
    # adam (paper; fresh each round) | sgd (FedLAW's code: momentum 0.9, weight decay server_weight_decay, kept
    # across rounds, at the clients' initial lr: set server_lr to it; FedLAW's table presets run this form)
    optimizer: str = "adam"
    beta1: float = 0.5  # Adam's beta1 (FedLAW App. C)
    beta2: float = 0.999  # Adam's beta2 (FedLAW App. C)
    server_weight_decay: float = 5e-4  # optimizer=sgd's weight decay (FedLAW's code: the clients' 5e-4)

    def __post_init__(self) -> None:
        positive("server_lr", self.server_lr)
        positive("server_weight_decay", self.server_weight_decay, allow_zero=True)
        positive("server_epochs", self.server_epochs, allow_zero=True)
        one_of("optimizer", self.optimizer, ("adam", "sgd"))
        # the server's torch.optim.Adam refuses a beta of 1: its bias correction divides by 1 - beta^t = 0
        in_range("beta1", self.beta1, 0.0, 1.0, hi_open=True, why="Adam's bias correction divides by 1 - beta1^t")
        in_range("beta2", self.beta2, 0.0, 1.0, hi_open=True, why="Adam's bias correction divides by 1 - beta2^t")


@dataclass
class ServerFTParams(DistillParams):
    """Server-FT: E_s = 2 (FedLAW App. C: 100 epochs hurt it)."""

    server_epochs: int = 2  # E_s (FedLAW App. C: 2; 100 epochs hurt it)


class ServerTrained(ProxyMethod):
    """FedAvg, then ``server_epochs`` epochs of training the global model on the proxy set."""

    hp: DistillParams

    def server_init(self, params: Tensors) -> Tree:
        # optimizer=sgd: the code's SGD momentum buffer, kept across rounds (zero = torch's first-step buffer)
        return {"momentum": zeros_like(params)} if self.hp.optimizer == "sgd" else {}

    def optimizer(self, tensors: list[torch.Tensor]) -> torch.optim.Optimizer:
        hp = self.hp
        if hp.optimizer == "adam":
            return adam(tensors, hp.server_lr, (hp.beta1, hp.beta2))
        return torch.optim.SGD(tensors, lr=hp.server_lr, momentum=SGD_MOMENTUM, weight_decay=hp.server_weight_decay)

    def server_loss(self, params: Tensors, batch: Batch, teachers: list[Teacher]) -> torch.Tensor:
        raise NotImplementedError

    def teachers(
        self, params: Tensors, models: Tensors, buffers: Tensors | None, weights: torch.Tensor, info: RoundInfo
    ) -> list[Teacher]:
        """The teachers whose mean logits are distilled (none: plain fine-tuning); ``buffers`` the clients'
        stacked BatchNorm statistics (None without any)."""
        return []

    def aggregate(
        self, params: Tensors, server_state: Tree, uploads: Tree, weights: torch.Tensor, info: RoundInfo
    ) -> tuple[Tensors, Tree, dict[str, float]]:
        models = {k: w.detach() for k, w in uploads["params"].items()}
        buffers = uploads.get("buffers")
        if buffers is not None:  # the student starts from the FedAvg state dict, statistics included
            self.model.set_buffers(average_buffers(buffers, weights))
        student = {k: w.clone().requires_grad_(True) for k, w in weighted_mean(models, weights).items()}
        teachers = self.teachers(params, models, buffers, weights, info)
        opt = self.optimizer(list(student.values()))
        if "momentum" in server_state:
            for k, p in student.items():
                opt.state[p]["momentum_buffer"] = server_state["momentum"][k].clone()
        last = torch.tensor(float("nan"))
        with torch.enable_grad():
            for _, batches in self.proxy_epochs(info.round, self.hp.server_epochs):
                for batch in batches:
                    opt.zero_grad()
                    out = self.server_loss(student, batch, teachers)  # train mode: updates the global statistics
                    out.backward()
                    opt.step()
                    last = out.detach()
        if "momentum" in server_state:
            kept = {k: opt.state[p]["momentum_buffer"].detach() for k, p in student.items()}
            server_state = {**server_state, "momentum": kept}
        return {k: w.detach() for k, w in student.items()}, server_state, {"server_loss": float(last)}


@ALGORITHMS.register("serverft", ServerFTParams)
class ServerFT(ServerTrained):
    """FedAvg + cross-entropy fine-tuning on the proxy set (FedLAW's Server-FT baseline)."""

    stacks = True  # (tests/engines/test_stacked.py)

    def server_loss(self, params: Tensors, batch: Batch, teachers: list[Teacher]) -> torch.Tensor:
        return self.model.loss(params, batch)


@ALGORITHMS.register("feddf", DistillParams)
class FedDF(ServerTrained):
    """Ensemble distillation of the client models into the FedAvg model (Lin et al. 2020, Alg. 1)."""

    stacks = True  # (tests/engines/test_stacked.py)

    def teachers(
        self, params: Tensors, models: Tensors, buffers: Tensors | None, weights: torch.Tensor, info: RoundInfo
    ) -> list[Teacher]:
        """The cohort's client models, each with its own uploaded statistics (FedLAW code: the client nodes)."""
        return [
            Teacher(unstack(models, i), None if buffers is None else unstack(buffers, i))
            for i in range(weights.shape[0])
        ]

    def teacher_logits(self, teachers: list[Teacher], x: torch.Tensor) -> torch.Tensor:
        """Mean teacher logits on a batch. Recomputed per batch as FedLAW's code does: the same forward as
        the student's, so a teacher equal to the student gives exactly zero KL gradient (a cached full-set
        forward differs in the last bits, which Adam would amplify)."""
        module, outs = self.model.module, []
        with torch.no_grad():
            for t in teachers:
                if t.batch_stats:  # train mode updates the statistics it is given: a scratch copy
                    module.train()
                    outs.append(self.model.logits(t.params, x, clone(self.model.buffers)))
                else:
                    module.eval()
                    outs.append(self.model.logits(t.params, x, t.buffers))
        module.train()
        return sum(outs) / len(teachers)

    def server_loss(self, params: Tensors, batch: Batch, teachers: list[Teacher]) -> torch.Tensor:
        return kl_to_teacher(self.model.logits(params, batch["x"]), self.teacher_logits(teachers, batch["x"]))


@ALGORITHMS.register("fedbe", DistillParams)
class FedBE(FedDF):
    """FedDF with the FedAvg model and one SWAG-Gaussian sample added to the teachers (Chen & Chao 2021)."""

    stacks = True  # (tests/engines/test_stacked.py)

    def teachers(
        self, params: Tensors, models: Tensors, buffers: Tensors | None, weights: torch.Tensor, info: RoundInfo
    ) -> list[Teacher]:
        gen = torch_gen(self.seed, "fedbe", info.round)
        clients = super().teachers(params, models, buffers, weights, info)
        fedavg = Teacher(weighted_mean(models, weights), batch_stats=True)
        return [fedavg, *clients, Teacher(swag_gaussian(params, models, gen), batch_stats=True)]


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
