"""FedRobust (Reisizadeh et al. 2020): robustness to affine distribution shifts by local descent-ascent.

Client i keeps an affine perturbation of its (flattened, normalised) inputs, x -> Lambda_i x + delta_i.
Each local step descends w on l(w; Lambda_i x + delta_i, y) and takes one ascent step on
(Lambda_i, delta_i) for l - lam (||Lambda_i - I||_F^2 + ||delta_i||^2) (FedRobust Alg. 1, eq. 5).
The server averages w; (Lambda_i, delta_i) never leave the client (they are its persistent state).

``structure``: ``full`` Lambda_i in R^{d x d} (the paper; d = input size, 784 for 28x28 images, i.e.
2.4 MB per client), ``diagonal`` (a per-coordinate scale, d numbers), or ``auto`` (default): full up to
d = 1024 (the MNIST family), diagonal above (CIFAR's d = 3072 would need 38 MB per client).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Literal

import torch

from fedrun.algorithms.base import AlgoParams, Batch, ClientContext, SetupEnv, sgd_step
from fedrun.algorithms.fedavg import FedAvg
from fedrun.config.registry import ALGORITHMS, positive
from fedrun.core import autodiff
from fedrun.core.tree import Tensors, Tree

FULL_MAX_DIM = 1024


@dataclass
class FedRobustParams(AlgoParams):
    """``lam``: penalty on the perturbation size; ``adv_lr``: ascent step (values not given in the
    sources we have; chosen so that adv_lr * 2 lam < 1 keeps the ascent contractive); ``structure``: see
    the module docstring."""

    lam: float = 1.0  # the paper's lambda, penalty on the perturbation size: UNSOURCED, fedrun's choice
    adv_lr: float = 0.01  # the ascent step eta2: UNSOURCED, fedrun's choice (2 lam adv_lr < 1: a contractive ascent)
    # auto (full up to d=1024 inputs, diagonal above) | full (Lambda in R^{d x d}, the paper) | diagonal
    structure: Literal["auto", "full", "diagonal"] = "auto"

    def __post_init__(self) -> None:
        positive("lam", self.lam, allow_zero=True)
        positive("adv_lr", self.adv_lr, allow_zero=True)


@ALGORITHMS.register("fedrobust", FedRobustParams)
class FedRobust(FedAvg):
    """Descent on w and ascent on (Lambda_i, delta_i) in the same local step; server as FedAvg."""

    stacks = True  # (tests/engines/test_stacked.py)

    hp: FedRobustParams

    input_shape: tuple[int, ...] | None = None

    @property
    def full(self) -> bool:
        """Whether Lambda_i is a full d x d matrix (else a diagonal, stored as d numbers)."""
        small = self.input_shape is not None and prod(self.input_shape) <= FULL_MAX_DIM
        return self.hp.structure == "full" or (self.hp.structure == "auto" and small)

    def setup(self, env: SetupEnv) -> None:
        super().setup(env)
        self.input_shape = tuple(env.data.data.input_shape)

    def client_init(self, params: Tensors) -> Tree:
        """Lambda_i = I (or ones), delta_i = 0: no perturbation before the first ascent step."""
        if self.input_shape is None:
            raise RuntimeError("FedRobust.setup(env) must run before client_init (it needs the input size)")
        d = prod(self.input_shape)
        ref = next(iter(params.values()))
        lam = torch.eye(d, dtype=ref.dtype, device=ref.device) if self.full else ref.new_ones(d)
        return {"Lambda": lam, "delta": ref.new_zeros(d)}

    def perturb(self, x: torch.Tensor, adv: Tree) -> torch.Tensor:
        flat = x.flatten(1)
        if self.full:
            out = flat @ adv["Lambda"].T
        else:
            out = flat * adv["Lambda"]
        return (out + adv["delta"]).reshape(x.shape)

    def adv_loss(self, params: Tensors, adv: Tree, batch: Batch, ctx: ClientContext) -> torch.Tensor:
        return self.local_loss(params, {**batch, "x": self.perturb(batch["x"], adv)}, ctx)

    def client_step(
        self, params: Tensors, opt: Tensors | None, batch: Batch, ctx: ClientContext
    ) -> tuple[Tensors, Tensors | None, Tree, torch.Tensor]:
        fl, hp = self.fl, self.hp
        adv = {"Lambda": ctx.state["Lambda"], "delta": ctx.state["delta"]}
        (g_w, g_adv), loss = autodiff.grad_and_value(self.adv_loss, argnums=(0, 1))(params, adv, batch, ctx)
        params, opt = sgd_step(params, g_w, opt, ctx.lr, fl.momentum, fl.weight_decay, fl.grad_clip)
        eye = torch.eye(adv["Lambda"].shape[-1], dtype=loss.dtype, device=loss.device)
        ident = eye if self.full else torch.ones_like(adv["delta"])
        lam_new = adv["Lambda"] + hp.adv_lr * (g_adv["Lambda"] - 2 * hp.lam * (adv["Lambda"] - ident))
        delta_new = adv["delta"] + hp.adv_lr * (g_adv["delta"] - 2 * hp.lam * adv["delta"])
        return params, opt, {**ctx.state, "Lambda": lam_new, "delta": delta_new}, loss
