"""FedFA (Zhou, Zhang & Tsang 2023, "FedFA: Federated Learning with Feature Anchors to Align Features and
Classifiers for Heterogeneous Data") as in FedIMA's code: feature anchors plus classifier calibration.

Following FedIMA (``utils/optimizer.py`` ``fedfa_cl_optimizer`` lines 732-845, ``utils/AnchorLoss.py``):
- class anchors a_c in R^d (d = the classifier's input size), initialised as distinct rows of I_d
  (random unit rows when C > d), averaged by the server with the model's weights p_i;
- local loss, after round 0: CE + lambda sum_x ||z_x - a_{y_x}||^2 / (n_{y_x} C), n_y = count of class y
  in the batch (AnchorLoss.forward); round 0 trains on CE alone; the anchors in the loss stay the
  downloaded ones for the whole round;
- classifier calibration, for rounds > R/4: after each SGD step, one Adam step (lr 1e-3, fresh optimizer
  each round) on the classifier only, for CE(classifier(a_c), c) over all classes;
- anchor update, once per local *epoch* (lines 765-842): starting from the downloaded anchors,
  a_c <- 0.5 a_c + 0.5 S_c / (batches in the epoch), S_c the sum of the batch class-means of z over the
  epoch's batches where class c occurs; the divisor is ``batch_idx + 1``, every batch of the epoch (line
  834), and only the client's classes are updated. After E epochs the downloaded anchor keeps weight 0.5^E.
  An epoch is ceil(n_i / B) steps (``ClientContext.size`` = n_i); with ``fl.local_steps`` the steps are cut
  into such epochs the same way, and a last partial epoch is divided by its own number of batches.
The anchors (C x d numbers) travel both ways with the model.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from fedrun.algorithms.base import AlgoParams, Batch, ClientContext, RoundInfo, SetupEnv, sgd_step
from fedrun.algorithms.fedavg import FedAvg
from fedrun.config.registry import ALGORITHMS, in_range, positive
from fedrun.config.schema import FLConfig
from fedrun.core import autodiff
from fedrun.core.rng import torch_gen
from fedrun.core.tree import Tensors, Tree, weighted_mean
from fedrun.models.base import FunctionalModel
from fedrun.models.features import FeatureModel

ADAM_BETAS, ADAM_EPS = (0.9, 0.999), 1e-8


@dataclass
class FedFAParams(AlgoParams):
    """FedIMA code defaults: ``lam`` = 0.1 (anchor loss), ``anchor_momentum`` = 0.5, ``calib_lr`` = 1e-3
    (Adam's default), calibration from round ``calib_start`` x R (R/4)."""

    lam: float = 0.1  # anchor-loss weight, from round 1 (FedIMA's code, utils/optimizer.py)
    anchor_momentum: float = 0.5  # EMA momentum of the class anchors, once per local epoch (FedIMA's code)
    calib_lr: float = 1e-3  # Adam's lr of the classifier calibration (FedIMA's code: Adam's default)
    calib_start: float = 0.25  # calibration from round calib_start x fl.rounds on (FedIMA's code: R/4)

    @classmethod
    def derived_rounds(cls, node: Mapping[str, Any], rounds: int) -> dict[str, int]:
        """The round ``fl.rounds`` = ``rounds`` decides (fedrun/config/identity.py round_schedule): the first
        calibrated one, the first t > calib_start x R (client_step)."""
        return {"calib_start": math.floor(node.get("calib_start", cls.calib_start) * rounds) + 1}

    def __post_init__(self) -> None:
        positive("lam", self.lam, allow_zero=True)
        in_range("anchor_momentum", self.anchor_momentum, 0.0, 1.0)
        positive("calib_lr", self.calib_lr, allow_zero=True)
        in_range("calib_start", self.calib_start, 0.0, 1.0)


def one_hot(y: torch.Tensor, n_classes: int, dtype: torch.dtype) -> torch.Tensor:
    """F.one_hot without its data-dependent size check, so it works under vmap."""
    return (y.unsqueeze(-1) == torch.arange(n_classes, device=y.device)).to(dtype)


def anchor_loss(z: torch.Tensor, y: torch.Tensor, anchors: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
    """sum_x ||z_x - a_{y_x}||^2 / (n_{y_x} C), n_y the (weighted) count of class y in the batch."""
    n_classes = anchors.shape[0]
    w = torch.ones_like(y, dtype=z.dtype) if weight is None else weight.to(z.dtype)
    counts = (one_hot(y, n_classes, z.dtype) * w.unsqueeze(-1)).sum(0)
    dist = (z - anchors[y]).pow(2).sum(-1)
    return (w * dist / counts[y].clamp_min(1.0)).sum() / n_classes


@ALGORITHMS.register("fedfa", FedFAParams)
class FedFA(FedAvg):
    """Anchor-regularised local training with classifier calibration; anchors averaged on the server."""

    stacks = True  # (tests/engines/test_stacked.py)

    hp: FedFAParams

    def __init__(self, hp: FedFAParams, fl: FLConfig, model: FunctionalModel) -> None:
        super().__init__(hp, fl, model)
        self.features = FeatureModel(model)
        self.num_classes: int | None = None

    def setup(self, env: SetupEnv) -> None:
        super().setup(env)
        self.num_classes = env.data.data.num_classes

    def _classes(self) -> int:
        return self.num_classes if self.num_classes is not None else self.features.head.out_features

    def server_init(self, params: Tensors) -> Tree:
        c, d = self._classes(), self.features.dim
        ref = next(iter(params.values()))
        g = torch_gen(self.seed, "fedfa-anchors")
        if c <= d:
            anchors = torch.eye(d, dtype=ref.dtype)[torch.randperm(d, generator=g)[:c]]
        else:
            anchors = F.normalize(torch.randn(c, d, generator=g, dtype=ref.dtype), dim=1)
        return {"anchors": anchors.to(ref.device), "round": torch.zeros((), device=ref.device)}

    def client_init(self, params: Tensors) -> Tree:
        c, d = self._classes(), self.features.dim
        ref = next(iter(params.values()))
        head = self.features.head_params(params)
        return {
            "z_sum": ref.new_zeros(c, d),  # this epoch: sum of the batch class-means of z
            "z_batches": ref.new_zeros(c),  # this epoch: batches where the class occurred
            "epoch_steps": ref.new_zeros(()),  # this epoch: batches so far (the code's batch_idx + 1)
            "anchor_acc": ref.new_zeros(c, d),  # the client's anchors so far = anchor_keep * a + anchor_acc
            "anchor_keep": ref.new_ones(c),
            "adam_m": {k: torch.zeros_like(v) for k, v in head.items()},
            "adam_v": {k: torch.zeros_like(v) for k, v in head.items()},
            "adam_t": ref.new_zeros(()),
        }

    def broadcast(self, params: Tensors, server_state: Tree) -> Tree:
        rnd = server_state["round"]
        use_anchor = (rnd > 0).to(rnd.dtype)
        calibrate = (rnd > self.hp.calib_start * self.fl.rounds).to(rnd.dtype)
        return {"anchors": server_state["anchors"], "flags": torch.stack([use_anchor, calibrate])}

    def _loss(self, params: Tensors, batch: Batch, ctx: ClientContext) -> tuple[torch.Tensor, torch.Tensor]:
        logits, z = self.features.forward(params, batch["x"], batch.get("buffers"))
        ce = F.cross_entropy(logits, batch["y"], reduction="none")
        w = batch.get("w")
        ce = ce.mean() if w is None else (ce * w).sum() / w.sum().clamp_min(1.0)
        anchors = ctx.extras["anchors"]
        reg = anchor_loss(z, batch["y"], anchors, w)
        return ce + ctx.extras["flags"][0] * self.hp.lam * reg, z.detach()

    def local_loss(self, params: Tensors, batch: Batch, ctx: ClientContext) -> torch.Tensor:
        return self._loss(params, batch, ctx)[0]

    def client_step(
        self, params: Tensors, opt: Tensors | None, batch: Batch, ctx: ClientContext
    ) -> tuple[Tensors, Tensors | None, Tree, torch.Tensor]:
        fl, st, anchors = self.fl, ctx.state, ctx.extras["anchors"]
        grads, (loss, z) = autodiff.grad_and_value(self._loss, has_aux=True)(params, batch, ctx)
        params, opt = sgd_step(params, grads, opt, ctx.lr, fl.momentum, fl.weight_decay, fl.grad_clip)
        params, st = self._calibrate(params, st, anchors, ctx.extras["flags"][1])
        # class means of this batch's features, accumulated for the anchor update
        onehot = one_hot(batch["y"], anchors.shape[0], z.dtype)
        if batch.get("w") is not None:
            onehot = onehot * batch["w"].to(z.dtype).unsqueeze(-1)
        counts = onehot.sum(0)
        means = (onehot.T @ z) / counts.clamp_min(1.0).unsqueeze(-1)
        present = (counts > 0).to(z.dtype)
        st = {
            **st,
            "z_sum": st["z_sum"] + means * present.unsqueeze(-1),
            "z_batches": st["z_batches"] + present,
            "epoch_steps": st["epoch_steps"] + 1,
        }
        if ctx.size is not None:  # the epoch's last batch: fold its class means into the client's anchors
            per_epoch = torch.ceil(ctx.size / fl.batch_size).clamp_min(1.0)
            st = self._end_epoch(st, (st["epoch_steps"] >= per_epoch).to(z.dtype))
        return params, opt, st, loss

    def _end_epoch(self, st: Tree, end: torch.Tensor) -> Tree:
        """Where ``end`` is 1: a_c <- beta a_c + (1 - beta) S_c / (the epoch's batches) for the classes seen
        in the epoch (kept as a_c = keep_c * a^t + acc_c), and the epoch's sums restart."""
        beta = self.hp.anchor_momentum
        seen = end * (st["z_batches"] > 0).to(end.dtype)
        mean = st["z_sum"] / st["epoch_steps"].clamp_min(1.0)
        acc = torch.where(seen.unsqueeze(-1) > 0, beta * st["anchor_acc"] + (1 - beta) * mean, st["anchor_acc"])
        keep = torch.where(seen > 0, beta * st["anchor_keep"], st["anchor_keep"])
        return {
            **st,
            "anchor_acc": acc,
            "anchor_keep": keep,
            "z_sum": st["z_sum"] * (1 - end),
            "z_batches": st["z_batches"] * (1 - end),
            "epoch_steps": st["epoch_steps"] * (1 - end),
        }

    def _calibrate(self, params: Tensors, st: Tree, anchors: torch.Tensor, on: torch.Tensor) -> tuple[Tensors, Tree]:
        """One Adam step on the classifier for CE(head(a_c), c), applied where ``on`` is 1."""
        prefix = f"{self.features.head_name}."
        head = self.features.head_params(params)
        target = torch.arange(anchors.shape[0], device=anchors.device)

        def calib_loss(h: Tensors) -> torch.Tensor:
            return F.cross_entropy(F.linear(anchors, h["weight"], h.get("bias")), target)

        g = autodiff.grad(calib_loss)(head)
        b1, b2 = ADAM_BETAS
        t = st["adam_t"] + on
        m = {k: torch.where(on > 0, b1 * st["adam_m"][k] + (1 - b1) * g[k], st["adam_m"][k]) for k in head}
        v = {k: torch.where(on > 0, b2 * st["adam_v"][k] + (1 - b2) * g[k] ** 2, st["adam_v"][k]) for k in head}
        tc = t.clamp_min(1.0)
        new = dict(params)
        for k in head:
            step = self.hp.calib_lr * (m[k] / (1 - b1**tc)) / (torch.sqrt(v[k] / (1 - b2**tc)) + ADAM_EPS)
            new[prefix + k] = head[k] - on * step
        return new, {**st, "adam_m": m, "adam_v": v, "adam_t": t}

    def client_finish(self, start: Tensors, end: Tensors, ctx: ClientContext, steps: torch.Tensor) -> tuple[Tree, Tree]:
        a = ctx.extras["anchors"]
        # a partial last epoch (fl.local_steps; or no ctx.size: the round counts as one epoch) closes here
        st = self._end_epoch(ctx.state, (ctx.state["epoch_steps"] > 0).to(a.dtype))
        anchors = st["anchor_keep"].unsqueeze(-1) * a + st["anchor_acc"]
        reset = {
            "z_sum": torch.zeros_like(st["z_sum"]),
            "z_batches": torch.zeros_like(st["z_batches"]),
            "epoch_steps": torch.zeros_like(st["epoch_steps"]),
            "anchor_acc": torch.zeros_like(st["anchor_acc"]),
            "anchor_keep": torch.ones_like(st["anchor_keep"]),
            "adam_m": {k: torch.zeros_like(v) for k, v in st["adam_m"].items()},
            "adam_v": {k: torch.zeros_like(v) for k, v in st["adam_v"].items()},
            "adam_t": torch.zeros_like(st["adam_t"]),
        }
        return {"params": end, "anchors": anchors}, reset

    def aggregate(
        self, params: Tensors, server_state: Tree, uploads: Tree, weights: torch.Tensor, info: RoundInfo
    ) -> tuple[Tensors, Tree, dict[str, float]]:
        new = weighted_mean(uploads["params"], weights)
        anchors = weighted_mean({"a": uploads["anchors"]}, weights)["a"]
        return new, {"anchors": anchors, "round": server_state["round"] + 1}, {}
