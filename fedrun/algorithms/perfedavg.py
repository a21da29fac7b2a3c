"""Per-FedAvg (Fallah, Mokhtari & Ozdaglar, NeurIPS 2020): FedAvg on the MAML objective, Hessian-free.

Each client minimises F_i(w) = f_i(w - alpha grad f_i(w)) (eq. 3), the loss after one personalising gradient
step. One local step of Algorithm 1 on three independent batches D, D', D'':

    w'  = w - alpha grad f_i(w; D)                                       (the temporary, personalised model)
    g   = grad f_i(w'; D')
    d   = [grad f_i(w + delta g; D'') - grad f_i(w - delta g; D'')] / (2 delta)   (~ hess f_i(w; D'') g)
    w  <- w - beta (g - alpha d)                                         (Per-FedAvg (HF), eq. 9-10)

``variant=fo`` drops the Hessian term (Per-FedAvg (FO): w <- w - beta g). beta is the round's local lr
(``fl.lr`` and its schedule; momentum, weight decay and clipping as ``fl.*`` set them); the server averages as
FedAvg. D, D' and D'' are the step's minibatch dealt out by position (samples 0, 3, 6, ... to D; 1, 4, ... to
D'; 2, 5, ... to D''), so ``fl.batch_size`` is three of the paper's batches and every engine sees the same
split (a part a short last batch lacks has zero gradient). The personalised model is one step of size alpha
from w on the client's own data (Sec. 3): ``eval.finetune_steps=1 eval.finetune_lr=<alpha>``, which the
method asks for itself (:attr:`adaptation`) unless ``eval.finetune_*`` are set. alpha = 0 is FedAvg on D'.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedrun.algorithms.base import AlgoParams, Batch, ClientContext, sgd_step
from fedrun.algorithms.fedavg import FedAvg
from fedrun.config.registry import ALGORITHMS, positive
from fedrun.config.schema import FLConfig, one_of
from fedrun.core import autodiff
from fedrun.core.tree import Tensors, Tree
from fedrun.models.base import FunctionalModel

PARTS = 3  # D, D', D''
SAMPLE_KEYS = ("x", "y", "w")


@dataclass
class PerFedAvgParams(AlgoParams):
    """alpha (the personalising step), delta (the Hessian-free finite difference) and the variant."""

    # no official code; alpha 0.01 and delta 0.001 are the defaults of KarhouTam/Per-FedAvg and FLGo's perfedavg
    alpha: float = 0.01  # alpha, the inner (personalising) step size of eq. 3 (KarhouTam/Per-FedAvg --alpha 0.01)
    delta: float = 0.001  # delta of the Hessian-vector finite difference (eq. 10; FLGo perfedavg delta 0.001)
    variant: str = "hf"  # hf: Per-FedAvg (HF) | fo: first-order, the Hessian term dropped

    def __post_init__(self) -> None:
        positive("alpha", self.alpha, allow_zero=True)
        positive("delta", self.delta)
        one_of("variant", self.variant, ("hf", "fo"))


def deal(batch: Batch, part: int) -> Batch:
    """Part ``part`` of the minibatch: the samples at positions part, part + 3, ... (padding weights kept)."""
    w = batch.get("w")
    weights = w if w is not None else torch.ones_like(batch["y"], dtype=torch.get_default_dtype())
    out = {k: v[part::PARTS] for k, v in {**batch, "w": weights}.items() if k in SAMPLE_KEYS}
    return {**batch, **out}


@ALGORITHMS.register("perfedavg", PerFedAvgParams)
class PerFedAvg(FedAvg):
    """Clients: MAML steps w <- w - beta (g - alpha hess g); server: FedAvg; evaluation: one alpha step first."""

    stacks = True  # (tests/engines/test_stacked.py)

    hp: PerFedAvgParams

    def __init__(self, hp: PerFedAvgParams, fl: FLConfig, model: FunctionalModel) -> None:
        super().__init__(hp, fl, model)
        self.adaptation = (1, hp.alpha)

    def meta_grad(self, w: Tensors, batch: Batch, ctx: ClientContext) -> tuple[Tensors, torch.Tensor]:
        """(g - alpha d, the loss at w' on D'): the Per-FedAvg direction of one step (eq. 9-10)."""
        grad = autodiff.grad_and_value(self.local_loss)
        a, d_prime = self.hp.alpha, deal(batch, 1)
        g0, _ = grad(w, deal(batch, 0), ctx)
        g, loss = grad({k: p - a * g0[k] for k, p in w.items()}, d_prime, ctx)
        if self.hp.variant == "fo" or a == 0:
            return g, loss
        delta, d_two = self.hp.delta, deal(batch, 2)
        plus, _ = grad({k: p + delta * g[k] for k, p in w.items()}, d_two, ctx)
        minus, _ = grad({k: p - delta * g[k] for k, p in w.items()}, d_two, ctx)
        return {k: g[k] - a * (plus[k] - minus[k]) / (2 * delta) for k in w}, loss

    def client_step(
        self, params: Tensors, opt: Tensors | None, batch: Batch, ctx: ClientContext
    ) -> tuple[Tensors, Tensors | None, Tree, torch.Tensor]:
        direction, loss = self.meta_grad(params, batch, ctx)
        fl = self.fl
        params, opt = sgd_step(params, direction, opt, ctx.lr, fl.momentum, fl.weight_decay, fl.grad_clip)
        return params, opt, ctx.state, loss
