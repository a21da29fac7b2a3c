"""FedRoD (Chen & Chao, ICLR 2022): a generic model trained with a balanced loss, and a personal head added to it.

The model is a shared body phi and a generic head g (together the generic model, averaged by FedAvg); each
client also keeps a personal head p_i, and its personalised predictor is g(phi(x)) + p_i(phi(x)) (Sec. 4, the
"linear" personal head of Fig. 2). At every local step, on the same minibatch:

- the generic model takes an SGD step on the balanced softmax loss (BSM, Sec. 4.1, eq. 5 with Ren et al.
  2020's balanced softmax): cross-entropy of the logits shifted by log n_{i,c}, client i's count of class c,
  which makes the local objective consistent with the class-balanced one whatever the client's label skew;
- the personal head takes a step on the plain cross-entropy of g(phi(x)).detach() + p_i(phi(x).detach())
  (Sec. 4.2, eq. 6: the personal head learns the client's own distribution on top of the generic predictor),
  at the step's start point, with the round's lr and no momentum (PFLlib's ``clientrod.py``).

Because the head is one linear layer, g(z) + p_i(z) is the head whose weight and bias are the sums: the
personalised model is the global model with its head replaced by g + p_i (:meth:`personal_model`), and a zero
personal head is exactly the generic model. No official code was released (``hongyouc/Fed-RoD`` holds only
a README); PFLlib starts p_i as a copy of g and FedTHE's version as a fresh ``nn.Linear``; fedrun starts it at
zero (``p_init=zero``, the personalised predictor starts as the generic one) and offers ``p_init=copy``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from fedrun.algorithms.base import Batch, ClientContext, SetupEnv
from fedrun.algorithms.fedavg import FedAvg
from fedrun.algorithms.personal import HeadParams
from fedrun.config.registry import ALGORITHMS
from fedrun.config.schema import FLConfig, one_of
from fedrun.core import autodiff
from fedrun.core.errors import ConfigError
from fedrun.core.tree import Tensors, Tree
from fedrun.models.base import FunctionalModel, masked_mean

# log n_{i,c} of a class client i does not hold: -inf in PFLlib (log 0); a finite floor keeps gradients and
# checkpoints free of infs, and exp(-1e4) is 0 in every float format, so the softmax is the same
ABSENT = -1e4


@dataclass
class FedRoDParams(HeadParams):
    """``head``: the generic head (one linear layer; the model's last layer by default); ``p_init``: zero | copy."""

    p_init: str = "zero"  # the personal head's start: zero (= the generic model) | copy (of g, PFLlib)

    def __post_init__(self) -> None:
        one_of("p_init", self.p_init, ("zero", "copy"))


@ALGORITHMS.register("fedrod", FedRoDParams)
class FedRoD(FedAvg):
    """Generic model: FedAvg on the balanced softmax loss; personal head p_i: CE of g + p_i, kept on the client."""

    stacks = True  # (tests/engines/test_stacked.py)

    hp: FedRoDParams
    personal = True

    def __init__(self, hp: FedRoDParams, fl: FLConfig, model: FunctionalModel) -> None:
        super().__init__(hp, fl, model)
        layers = model.head_layers(hp.head)
        modules = dict(model.module.named_modules())
        linear = [n for n, m in modules.items() if isinstance(m, nn.Linear)]
        if len(layers) != 1 or not isinstance(modules[layers[0]], nn.Linear):
            raise ConfigError(
                "algorithm.head",
                f"FedRoD adds its personal head to one linear layer, not {layers}; valid: one of {linear}",
            )
        self.head = model.head_keys(hp.head)
        self.log_prior = torch.zeros(0)

    def setup(self, env: SetupEnv) -> None:
        """Every client's log n_{i,c} from its training labels (the balanced softmax's class counts)."""
        super().setup(env)
        fed = env.data
        labels = fed.train.y
        classes = int(fed.data.num_classes)
        counts = torch.stack([torch.bincount(labels[p], minlength=classes) for p in fed.clients]).to(torch.float64)
        self.log_prior = torch.where(counts > 0, counts.clamp(min=1).log(), torch.full_like(counts, ABSENT))

    def client_init(self, params: Tensors) -> Tree:
        first = params[self.head[0]]
        head = {k: params[k].detach().clone() if self.hp.p_init == "copy" else torch.zeros_like(params[k])
                for k in self.head}  # fmt: skip
        classes = first.shape[0]
        return {"p_head": head, "log_prior": torch.zeros(classes, dtype=first.dtype, device=first.device)}

    def client_rows(self, rows: Tree) -> Tree:
        """Each client's own log n_{i,c} (the template's zeros, a uniform prior, before :meth:`setup`)."""
        if self.log_prior.numel() == 0:
            return rows
        at = rows["log_prior"]
        return {**rows, "log_prior": self.log_prior.to(dtype=at.dtype, device=at.device)}

    def local_loss(self, params: Tensors, batch: Batch, ctx: ClientContext) -> torch.Tensor:
        """The balanced softmax loss: CE(logits + log n_{i,c}, y) (the generic model's objective)."""
        logits = self.model.logits(params, batch["x"], batch.get("buffers"))  # type: ignore[arg-type]
        per = F.cross_entropy(logits + ctx.state["log_prior"], batch["y"], reduction="none")
        return masked_mean(per, batch.get("w"))

    def personal_loss(self, p_head: Tensors, params: Tensors, batch: Batch) -> torch.Tensor:
        """CE of g(phi(x)) + p_i(phi(x)) with phi and g held fixed (only ``p_head`` is differentiated)."""
        return self.model.loss({**params, **{k: params[k] + p_head[k] for k in self.head}}, batch)

    def client_step(
        self, params: Tensors, opt: Tensors | None, batch: Batch, ctx: ClientContext
    ) -> tuple[Tensors, Tensors | None, Tree, torch.Tensor]:
        w, opt, state, loss = super().client_step(params, opt, batch, ctx)
        p = ctx.state["p_head"]
        fixed = {k: t.detach() for k, t in params.items()}
        g = autodiff.grad(self.personal_loss)(p, fixed, batch)
        return w, opt, {**state, "p_head": {k: p[k] - ctx.lr * g[k] for k in p}}, loss

    def personal_keys(self) -> list[str] | None:
        return list(self.head)

    def personal_model(self, params: Tensors, client_state: Tree) -> Tensors:
        """The global model with its head g + p_i: the personalised predictor g(z) + p_i(z) of a linear head."""
        p = client_state["p_head"]
        return {**params, **{k: params[k] + p[k] for k in self.head}}
