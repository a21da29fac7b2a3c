"""The SAM family of local optimizers: FedSAM, FedASAM and MoFedSAM (Qu et al. 2022; Caldarola et al. 2022).

Each local step takes two gradients on the same batch: g at w, then the gradient at the adversarial
point w + eps, which is what the step descends along.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedrun.algorithms.base import AlgoParams, Batch, ClientContext
from fedrun.algorithms.fedavg import FedAvg
from fedrun.algorithms.fedcm import GlobalMomentum
from fedrun.config.registry import ALGORITHMS, in_range, positive
from fedrun.core import autodiff
from fedrun.core.tree import Tensors, norm, tree_map

EPS = 1e-12


def sam_epsilon(grads: Tensors, rho: float) -> Tensors:
    """SAM's perturbation eps = rho g / ||g||_2, the norm over all parameters (FedSAM paper eq. 4)."""
    scale = (norm(grads) + EPS).reciprocal() * rho  # (what rho / (...) computes: the same rounding for a tensor rho)
    return tree_map(lambda g: g * scale, grads)


def asam_epsilon(params: Tensors, grads: Tensors, rho: float, eta: float) -> Tensors:
    """ASAM's eps = rho T^2 g / ||T g||, T = |w| + eta on '*weight*' tensors, 1 elsewhere (CAL minimizers.py)."""
    t = {k: (w.abs() + eta) if "weight" in k else torch.ones_like(w) for k, w in params.items()}
    tg = {k: t[k] * g for k, g in grads.items()}
    scale = (norm(tg) + EPS).reciprocal() * rho  # (as in sam_epsilon)
    return {k: t[k] * tg[k] * scale for k in grads}


def grad_at(algo: FedAvg, params: Tensors, eps: Tensors, batch: Batch, ctx: ClientContext) -> Tensors:
    """Gradient of the local objective at w + eps (eps held fixed: SAM's first-order approximation)."""
    shifted = tree_map(lambda w, e: w + e.detach(), params, eps)
    return autodiff.grad(algo.local_loss)(shifted, batch, ctx)


@dataclass
class FedSAMParams(AlgoParams):
    """``rho``: SAM radius (FedGAM paper used 0.1 for FedSAM; FL-Simulator default 0.1)."""

    rho: float = 0.1  # SAM radius (FedGAM paper used 0.1 for FedSAM; FL-Simulator default 0.1)

    def __post_init__(self) -> None:
        positive("rho", self.rho, allow_zero=True)


@ALGORITHMS.register("fedsam", FedSAMParams)
class FedSAM(FedAvg):
    """Local step w <- w - eta grad f(w + rho g/||g||), g = grad f(w) on the same batch; server FedAvg."""

    stacks = True  # (tests/engines/test_stacked.py)
    stack_scalars = ("rho",)

    hp: FedSAMParams

    def perturbation(self, params: Tensors, grads: Tensors) -> Tensors:
        return sam_epsilon(grads, self.hp.rho)

    def local_grad(self, params: Tensors, batch: Batch, ctx: ClientContext) -> tuple[Tensors, torch.Tensor]:
        g, loss = super().local_grad(params, batch, ctx)
        return grad_at(self, params, self.perturbation(params, g), batch, ctx), loss


@dataclass
class FedASAMParams(AlgoParams):
    """``rho``, ``eta``: ASAM radius and offset (CAL CIFAR defaults 0.7, 0.2; FedIMA uses them for CNNs)."""

    rho: float = 0.7  # ASAM radius (CAL CIFAR default, paper_experiments/cifar10.sh; FedIMA: 0.7 CNNs, else 0.2)
    eta: float = 0.2  # ASAM offset (CAL CIFAR default; FedIMA: 0.2 CNNs, else 0.05)

    def __post_init__(self) -> None:
        positive("rho", self.rho, allow_zero=True)
        positive("eta", self.eta, allow_zero=True)


@ALGORITHMS.register("fedasam", FedASAMParams)
class FedASAM(FedSAM):
    """FedSAM with ASAM's scale-invariant perturbation eps = rho T^2 g / ||T g|| (Kwon et al. 2021, eq. 7)."""

    stacks = True  # (tests/engines/test_stacked.py)

    hp: FedASAMParams

    def perturbation(self, params: Tensors, grads: Tensors) -> Tensors:
        return asam_epsilon(params, grads, self.hp.rho, self.hp.eta)


@dataclass
class MoFedSAMParams(FedSAMParams):
    """``alpha``: weight of the SAM gradient vs Delta^t (FL-Simulator default 0.1; 1 gives FedSAM).

    ``server_lr``: eta_g on the mean client update (FedSAM paper: 1).
    """

    alpha: float = 0.1  # weight of the SAM gradient vs Delta^t (FL-Simulator default 0.1; 1 gives FedSAM)
    server_lr: float = 1.0  # eta_g on the mean client update (FedSAM paper: 1)

    def __post_init__(self) -> None:
        super().__post_init__()
        # v = alpha grad f(w + eps) + (1 - alpha) Delta^t with Delta^0 = 0: inert at alpha = 0 (1 is FedSAM)
        in_range("alpha", self.alpha, 0.0, 1.0, lo_open=True, why="0 leaves v = Delta^t = 0: the clients never move")
        positive("server_lr", self.server_lr)


@ALGORITHMS.register("mofedsam", MoFedSAMParams)
class MoFedSAM(GlobalMomentum, FedSAM):
    """Local direction v = alpha grad f(w + eps) + (1 - alpha) Delta^t (FedSAM paper eq. 6).

    Delta^t, last round's per-step global pseudo-gradient, is downloaded with w^t (an extra vector).
    """

    stacks = True  # (tests/engines/test_stacked.py)

    hp: MoFedSAMParams

    def local_grad(self, params: Tensors, batch: Batch, ctx: ClientContext) -> tuple[Tensors, torch.Tensor]:
        grads, loss = super().local_grad(params, batch, ctx)
        return self.momentum_direction(grads, ctx), loss
