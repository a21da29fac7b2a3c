"""FedLAW (Li et al., ICML 2023, "Revisiting Weighted Aggregation in Federated Learning with Neural Networks").

The server learns a global shrink factor gamma and relative weights lambda on the proxy set each round
(Alg. 1):  w^{t+1} = gamma * sum_i lambda_i w_i,  minimising the proxy cross-entropy of that model with
Adam(betas (0.5, 0.999)) for E_s server epochs, StepLR(20, 0.5) per epoch, batch 128.

Parametrisations (paper Sec. 6 / code ``fedlaw_optimization``):
  exp (default)  lambda = softmax(x), gamma = e^g, from x_i = log p_i, g = 0 (so gamma = 1, lambda = p);
  quad           lambda_i = x_i^2 / sum x^2, gamma = g^2, from x_i = sqrt(1/m), g = 1 (the code's start, uniform
                 lambda); with ``learn=gamma`` from x_i = sqrt(p_i), so that lambda = p as Sec. 4 defines
                 adaptive GWS (lambda is not learned there, so its start is what it stays).
``learn``: both (FedLAW), gamma (adaptive GWS only, lambda = p), lambda (attentive LAW only, gamma = 1).
``swa`` (``fedlaw_swa``): two stages of E_s/2 epochs, lambda with cosine lr (T_max 100) and an SWA average
of x after epoch 5 with SWALR(0.05), gamma with StepLR. The second stage's proxy batches continue the first
stage's shuffle (one DataLoader, ``central_node.validate_set``, serves both stages in the code), not replay it.
``swa_order``: ``lambda_first`` (the official code's
``fedlaw_optimization``, the only order it implements, so the one behind the published numbers; gamma = 1
while lambda learns) or ``gamma_first`` (Sec. 6.1: "we first fix lambda and optimize gamma, then use the
learned gamma and fix it to optimize lambda with SWA"; the paper adds that the reverse order also works).
E_s = 100 is the paper's value; the code's default is ``server_epochs=20``. lr_s (``server_lr``) defaults to
App. C's value for the dataset, 0.01 on CIFAR-10 and 0.005 otherwise; a number overrides it. All parameters are combined
(normalisation affine ones scaled by gamma too).

BatchNorm statistics are not aggregated (the paper is silent; the code decides): the clients' uploaded ones
are ignored and the global model's are what the server's proxy passes leave. Every forward of the (gamma,
lambda) optimisation runs the global model in train mode (server_funct.py ``fedlaw_optimization`` lines
102-103 and 173/236, ``central_node.model.train()`` "to update the buffers for normalization layers"), so its
running statistics, kept from round to round (the central model persists; ``fedlaw_generate_global_model``
replaces only ``flat_w``), move towards those of the shrunk model gamma * sum_i lambda_i w_i with BatchNorm's
momentum 0.1, once per proxy batch. This class owns the buffers (``owns_buffers``), so the runner does not
overwrite them with the clients' means, which would evaluate the shrunk model with the statistics of the
unshrunk client models.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch.optim.lr_scheduler import CosineAnnealingLR, StepLR
from torch.optim.swa_utils import SWALR

from fedrun.algorithms.base import AlgoParams, Batch, RoundInfo, SetupEnv
from fedrun.algorithms.server_proxy import ProxyMethod, adam
from fedrun.config.registry import ALGORITHMS, in_range, positive
from fedrun.config.schema import one_of
from fedrun.core.errors import ConfigError
from fedrun.core.tree import Tensors, Tree


@dataclass
class FedLAWParams(AlgoParams):
    """FedLAW App. C: Adam(0.5, 0.999), lr_s 0.005 (0.01 for CIFAR-10), E_s 100 (code 20), StepLR(20, 0.5)."""

    server_lr: float | None = None  # None: App. C's lr_s for the run's dataset (see FedLAW.setup)
    server_epochs: int = 100  # E_s, server epochs on the proxy set per round (App. C: 100; code default 20)
    parametrization: str = "exp"  # gamma and lambda as exp/softmax of free weights (paper) | quad
    learn: str = "both"  # both (FedLAW) | gamma (adaptive global weight shrinking only) | lambda (attentive LAW only)
    swa: bool = False  # the official code's SWA variant: lambda with SWA (SWALR 0.05) for E_s/2, then gamma
    # with swa: lambda_first (the code's order: lambda with SWA, then gamma) | gamma_first (paper Sec. 6.1)
    swa_order: str = "lambda_first"
    beta1: float = 0.5  # the server's Adam beta1 (App. C)
    beta2: float = 0.999  # the server's Adam beta2 (App. C)
    step_size: int = 20  # StepLR's step in server epochs (App. C)
    step_gamma: float = 0.5  # StepLR's factor (App. C)
    # eta_g of Eq. 2: w = gamma (w^t + eta_g sum_i lambda_i (w_i - w^t)) (Table 10 sweeps it for adaptive GWS)
    global_lr: float = 1.0

    def __post_init__(self) -> None:
        if self.server_lr is not None:
            positive("server_lr", self.server_lr)
        positive("server_epochs", self.server_epochs, allow_zero=True)
        one_of("parametrization", self.parametrization, ("exp", "quad"))
        one_of("learn", self.learn, ("both", "gamma", "lambda"))
        one_of("swa_order", self.swa_order, ("lambda_first", "gamma_first"))
        # the server's torch.optim.Adam refuses a beta of 1: its bias correction divides by 1 - beta^t = 0
        in_range("beta1", self.beta1, 0.0, 1.0, hi_open=True, why="Adam's bias correction divides by 1 - beta1^t")
        in_range("beta2", self.beta2, 0.0, 1.0, hi_open=True, why="Adam's bias correction divides by 1 - beta2^t")
        positive("step_size", self.step_size)
        in_range("step_gamma", self.step_gamma, 0.0, 1.0, lo_open=True)
        positive("global_lr", self.global_lr)
        if self.swa and self.learn != "both":
            raise ConfigError("swa", "the SWA variant learns lambda then gamma; it needs learn=both")


@dataclass
class FedLAWSWAParams(FedLAWParams):
    """The official code's SWA variant."""

    swa: bool = True


@dataclass
class FedLAWGammaParams(FedLAWParams):
    """The ablation that learns gamma only (lambda = data-size weights)."""

    learn: str = "gamma"


@dataclass
class FedLAWLambdaParams(FedLAWParams):
    learn: str = "lambda"


@ALGORITHMS.register("fedlaw", FedLAWParams)
class FedLAW(ProxyMethod):
    """Learnable aggregation weights: w = gamma * sum_i lambda_i w_i fitted on the proxy set (Alg. 1)."""

    stacks = True  # (tests/engines/test_stacked.py)

    hp: FedLAWParams

    def setup(self, env: SetupEnv) -> None:
        super().setup(env)
        lr = self.hp.server_lr
        self.server_lr = lr if lr is not None else (0.01 if env.dataset == "cifar10" else 0.005)

    # ---- parametrisation -------------------------------------------------------------------------------
    def init_vars(self, weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(x, g) at the start of a round: gamma = 1 and lambda = p (exp; quad with learn=gamma) or uniform (quad)."""
        m = weights.shape[0]
        if self.hp.parametrization == "exp":
            x, g = weights.log(), torch.zeros(())
        elif self.hp.learn == "gamma":  # lambda stays at its start: p (Sec. 4, adaptive GWS)
            x, g = weights.sqrt(), torch.ones(())
        else:
            x, g = torch.full((m,), math.sqrt(1.0 / m), dtype=weights.dtype, device=weights.device), torch.ones(())
        return x.detach().clone().requires_grad_(True), g.to(x).detach().clone().requires_grad_(True)

    def gamma_lambda(self, x: torch.Tensor, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.hp.parametrization == "exp":
            return g.exp(), torch.softmax(x, 0)
        return g * g, x * x / (x * x).sum()

    @staticmethod
    def combine(models: Tensors, gamma: torch.Tensor, lam: torch.Tensor) -> Tensors:
        """gamma * sum_i lambda_i w_i over the stacked client models.

        One matrix-vector product per tensor: ~2x faster per server step than broadcasting lambda over the
        stack, and its backward needs no [clients, ...] temporary.
        """
        return {
            k: gamma * (lam.to(w.dtype) @ w.reshape(w.shape[0], -1)).reshape(w.shape[1:]) for k, w in models.items()
        }

    # ---- server training -------------------------------------------------------------------------------
    def fit(
        self,
        rnd: int,
        models: Tensors,
        x: torch.Tensor,
        g: torch.Tensor,
        train: list[torch.Tensor],
        epochs: int,
        schedule: str,
        source: Iterator[tuple[int, list[Batch]]] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, float]:
        """Adam on ``train`` (a subset of [x, g]) for ``epochs`` epochs; schedule: step, or swa (SWA of x).

        ``source``: the epochs' proxy batches, continued from an earlier stage (SWA); None: this round's from the
        start."""
        hp = self.hp
        if source is None:
            source = self.proxy_epochs(rnd, epochs)
        opt = adam(train, self.server_lr, (hp.beta1, hp.beta2))
        sched = StepLR(opt, hp.step_size, hp.step_gamma) if schedule == "step" else CosineAnnealingLR(opt, 100)
        swa_sched, x_avg, n_avg, last = None, None, 0, torch.tensor(float("nan"))
        with torch.enable_grad():
            for e, (_, batches) in enumerate(itertools.islice(source, epochs)):
                for batch in batches:
                    opt.zero_grad()
                    out = self.proxy_loss(models, x, g, batch)
                    out.backward()
                    opt.step()
                    last = out.detach()
                if schedule == "swa" and e > 5:
                    swa_sched = swa_sched or SWALR(opt, swa_lr=0.05)
                    n_avg += 1
                    x_avg = x.detach().clone() if x_avg is None else x_avg + (x.detach() - x_avg) / n_avg
                    swa_sched.step()
                else:
                    sched.step()
        if x_avg is not None:
            x = x_avg.requires_grad_(True)
        return x, g, float(last)

    def proxy_loss(self, models: Tensors, x: torch.Tensor, g: torch.Tensor, batch: Batch) -> torch.Tensor:
        gamma, lam = self.gamma_lambda(x, g)
        return self.model.loss(self.combine(models, gamma, lam), batch)

    def aggregate(
        self, params: Tensors, server_state: Tree, uploads: Tree, weights: torch.Tensor, info: RoundInfo
    ) -> tuple[Tensors, Tree, dict[str, float]]:
        hp = self.hp
        models = {k: w.detach() for k, w in uploads["params"].items()}
        if hp.global_lr != 1.0:
            # Eq. 2: gamma (w^t - eta_g sum_i lambda_i (w^t - w_i)) = gamma sum_i lambda_i w'_i,
            # with w'_i = w^t + eta_g (w_i - w^t) (sum_i lambda_i = 1)
            models = {k: params[k] + hp.global_lr * (w - params[k]) for k, w in models.items()}
        dtype = next(iter(models.values())).dtype
        x, g = self.init_vars(weights.to(dtype=dtype, device=next(iter(models.values())).device))
        loss = float("nan")
        if hp.server_epochs:
            if hp.swa:
                half, rest = hp.server_epochs // 2, hp.server_epochs - hp.server_epochs // 2
                source = self.proxy_epochs(info.round, hp.server_epochs)  # one shuffle stream for both stages
                if hp.swa_order == "lambda_first":
                    x, g, _ = self.fit(info.round, models, x, g, [x], half, "swa", source)
                    x, g, loss = self.fit(info.round, models, x, g, [g], rest, "step", source)
                else:
                    x, g, _ = self.fit(info.round, models, x, g, [g], half, "step", source)
                    x, g, loss = self.fit(info.round, models, x, g, [x], rest, "swa", source)
            else:
                train = {"both": [x, g], "gamma": [g], "lambda": [x]}[hp.learn]
                x, g, loss = self.fit(info.round, models, x, g, train, hp.server_epochs, "step")
        with torch.no_grad():
            gamma, lam = self.gamma_lambda(x, g)
            new = self.combine(models, gamma, lam)
            entropy = float(-(lam * lam.clamp_min(1e-12).log()).sum())
        diag = {
            "gamma": float(gamma),
            "lambda_min": float(lam.min()),
            "lambda_max": float(lam.max()),
            "lambda_entropy": entropy,
            "server_loss": loss,
        }
        return new, server_state, diag


@ALGORITHMS.register("fedlaw_swa", FedLAWSWAParams)
class FedLAWSWA(FedLAW):
    """FedLAW with the official code's SWA schedule (lambda with SWA, then gamma)."""

    stacks = True  # (tests/engines/test_stacked.py)


@ALGORITHMS.register("fedlaw_gamma", FedLAWGammaParams)
class FedLAWGamma(FedLAW):
    """Adaptive global weight shrinking only: learn gamma, lambda = p (FedLAW Sec. 4)."""

    stacks = True  # (tests/engines/test_stacked.py)


@ALGORITHMS.register("fedlaw_lambda", FedLAWLambdaParams)
class FedLAWLambda(FedLAW):
    """Attentive LAW only: learn lambda, gamma = 1 (FedLAW Sec. 5)."""

    stacks = True  # (tests/engines/test_stacked.py)
