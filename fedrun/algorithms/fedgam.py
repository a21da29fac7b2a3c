"""FedGAM and FedGAM-CV (FedGAM paper, sec. 4): gradient-norm-aware minimization on the clients.

FedGAM's local gradient (eq. 19) is grad f(w) + alpha rho grad f(w + rho g/||g||): the loss plus alpha
times the first-order flatness rho max_{B(w,rho)} ||grad f||, whose gradient is approximated by rho
times the gradient at SAM's ascent point. ``variant=official`` uses the GAM authors' optimizer instead
(xxgege/GAM gam.py; four gradients per step, see :func:`gam_official_grad`), in which alpha is unused.
FedGAM-CV (Alg. 2) adds SCAFFOLD-style control variates with its own server rule on c.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from fedrun.algorithms.base import AlgoParams, Batch, ClientContext, RoundInfo
from fedrun.algorithms.fedavg import FedAvg
from fedrun.algorithms.fedsam import EPS, grad_at, sam_epsilon
from fedrun.algorithms.scaffold import ControlVariates
from fedrun.config.registry import ALGORITHMS, positive
from fedrun.core import autodiff
from fedrun.core.tree import Tensors, Tree, dot, norm, tree_map, weighted_mean


@dataclass
class FedGAMParams(AlgoParams):
    """FedGAM Table 3: ``rho`` = 0.02, ``alpha`` = 0.2 (sensitivity study: rho 0.1, alpha 0.2 best).

    ``variant``: ``paper`` (eq. 19) or ``official`` (the GAM optimizer), which uses ``rho``,
    ``rho_norm``, ``gamma`` and ``beta1..3``: defaults from GAM's main_cifar.py CIFAR-10/ResNet preset
    (rho_norm 0.2, gamma 0.05, beta0 = beta1 = 0.1, beta2 = 1 - beta0, beta3 = 1 - beta1; its rho 0.03
    is not taken: ``rho`` stays FedGAM's).
    """

    rho: float = 0.02  # perturbation radius (FedGAM Table 3 setting, Sec. 5.1; also with variant=official)
    alpha: float = 0.2  # weight of the ascent gradient (FedGAM Table 3 setting; unused by variant=official)
    variant: Literal["paper", "official"] = "paper"  # paper: eq. 19 | official: the GAM authors' optimizer (gam.py)
    rho_norm: float = 0.2  # variant=official: GAM's main_cifar.py CIFAR-10/ResNet preset
    gamma: float = 0.05  # variant=official: GAM's main_cifar.py CIFAR-10/ResNet preset
    beta1: float = 0.1  # variant=official: GAM's beta1 (main_cifar.py; beta0 = beta1 = 0.1)
    beta2: float = 0.9  # variant=official: GAM's beta2 = 1 - beta0 (main_cifar.py)
    beta3: float = 0.9  # variant=official: GAM's beta3 = 1 - beta1 (main_cifar.py)

    def __post_init__(self) -> None:
        positive("rho", self.rho, allow_zero=True)
        positive("alpha", self.alpha, allow_zero=True)
        positive("rho_norm", self.rho_norm, allow_zero=True)
        positive("gamma", self.gamma, allow_zero=True)


def gam_official_grad(
    algo: FedAvg, params: Tensors, batch: Batch, ctx: ClientContext, hp: FedGAMParams
) -> tuple[Tensors, torch.Tensor]:
    """GAM optimizer's descent direction (xxgege/GAM): (direction, loss at w).

    g0 = grad f(w); g1 = grad f(w + rho g0/|g0|); w2 = w + rho_n (g1-g0)/|g1-g0|; g2 = grad f(w2);
    g3 = grad f(w2 + rho g2/|g2|); d = b1 g1 + b3 g3; p = g0 + |b2| g2; return d - gamma (p - proj_d p).
    """
    g0, loss = autodiff.grad_and_value(algo.local_loss)(params, batch, ctx)
    g1 = grad_at(algo, params, sam_epsilon(g0, hp.rho), batch, ctx)
    e12 = sam_epsilon(tree_map(lambda a, b: a - b, g1, g0), hp.rho_norm)
    w2 = tree_map(lambda w, e: w + e.detach(), params, e12)
    g2 = autodiff.grad(algo.local_loss)(w2, batch, ctx)
    g3 = grad_at(algo, w2, sam_epsilon(g2, hp.rho), batch, ctx)
    d = tree_map(lambda a, b: hp.beta1 * a + hp.beta3 * b, g1, g3)
    p = tree_map(lambda a, b: a + abs(hp.beta2) * b, g0, g2)
    nd, np_ = norm(d), norm(p)
    cosine = dot(p, d) / (nd * np_ + EPS)
    vertical = tree_map(lambda pp, dd: pp - cosine * np_ * dd / (nd + EPS), p, d)
    return tree_map(lambda dd, v: dd - hp.gamma * v, d, vertical), loss


def gam_grad(
    algo: FedAvg, params: Tensors, batch: Batch, ctx: ClientContext, hp: FedGAMParams
) -> tuple[Tensors, torch.Tensor]:
    """(grad f_GAM(w), f(w)): eq. 19, g + alpha rho grad f(w + rho g/||g||), or the official variant."""
    if hp.variant == "official":
        return gam_official_grad(algo, params, batch, ctx, hp)
    g, loss = autodiff.grad_and_value(algo.local_loss)(params, batch, ctx)
    if hp.alpha == 0:
        return g, loss
    g_hat = grad_at(algo, params, sam_epsilon(g, hp.rho), batch, ctx)
    s = hp.alpha * hp.rho
    return tree_map(lambda a, b: a + s * b, g, g_hat), loss


@ALGORITHMS.register("fedgam", FedGAMParams)
class FedGAM(FedAvg):
    """Local step w <- w - eta grad f_GAM(w) (Alg. 1, eq. 19); the server averages the client models."""

    stacks = True  # (tests/engines/test_stacked.py)

    hp: FedGAMParams

    def local_grad(self, params: Tensors, batch: Batch, ctx: ClientContext) -> tuple[Tensors, torch.Tensor]:
        return gam_grad(self, params, batch, ctx, self.hp)


@dataclass
class FedGAMCVParams(FedGAMParams):
    """As FedGAM (Table 3: rho 0.02, alpha 0.2; the sensitivity study found alpha 0.4 best for FedGAM-CV)."""


@ALGORITHMS.register("fedgam_cv", FedGAMCVParams)
class FedGAMCV(ControlVariates, FedAvg):
    """Alg. 2: w <- w - eta (grad f_GAM(w) - c_i + c) (eq. 20); c_i+ = c_i - c + (w_0 - w_E)/(eta E) (eq. 21).

    Server: c <- c + (1/K) sum_S Delta c_i (eq. 22, no m/N factor, unlike SCAFFOLD) and w = mean_S w_i.
    Uploads (w_i, Delta c_i): two vectors.
    """

    stacks = True  # (tests/engines/test_stacked.py)

    hp: FedGAMCVParams

    def local_grad(self, params: Tensors, batch: Batch, ctx: ClientContext) -> tuple[Tensors, torch.Tensor]:
        grads, loss = gam_grad(self, params, batch, ctx, self.hp)
        return self.correct(grads, ctx), loss

    def c_step(self, info: RoundInfo) -> float:
        return 1.0

    def aggregate(
        self, params: Tensors, server_state: Tree, uploads: Tree, weights: torch.Tensor, info: RoundInfo
    ) -> tuple[Tensors, Tree, dict[str, float]]:
        return weighted_mean(uploads["params"], weights), self.update_c(server_state, uploads, info), {}
