"""FedBN (Li et al. ICLR 2021): local BatchNorm layers, everything else averaged.

Each client keeps its BatchNorm layers, both the affine parameters and the running statistics, and the server
averages the other parameters (Algorithm 1: "aggregate all but the BN parameters"). A client's model is the
shared layers with its own BatchNorm; the global model (global test accuracy) keeps the initial BatchNorm.
Models with BatchNorm running statistics train on the sequential engine only (as every such model).
"""

from __future__ import annotations

import torch

from fedrun.algorithms.base import AlgoParams, Batch, ClientContext
from fedrun.algorithms.personal import SplitModel
from fedrun.config.registry import ALGORITHMS
from fedrun.config.schema import FLConfig
from fedrun.core.errors import ConfigError
from fedrun.core.tree import Tensors, Tree
from fedrun.models.base import FunctionalModel


@ALGORITHMS.register("fedbn", AlgoParams)
class FedBN(SplitModel):
    """BatchNorm parameters and statistics personal; the rest FedAvg."""

    def __init__(self, hp: AlgoParams, fl: FLConfig, model: FunctionalModel) -> None:
        super().__init__(hp, fl, model)
        params, self.stats = model.norm_keys()
        if not params and not self.stats:
            raise ConfigError(
                "model.name",
                "fedbn needs a model with BatchNorm layers; valid: resnet8, resnet20, "
                "resnet56, resnet110, wrn56_4, densenet121 (model.running_stats for their statistics)",
            )
        self.keep(params)

    def client_init(self, params: Tensors) -> Tree:
        buffers = {k: self.model.buffers[k].detach().clone() for k in self.stats}
        return {**super().client_init(params), "buffers": buffers}

    def client_step(
        self, params: Tensors, opt: Tensors | None, batch: Batch, ctx: ClientContext
    ) -> tuple[Tensors, Tensors | None, Tree, torch.Tensor]:
        # the forward pass updates the client's own statistics in place (they are its state's tensors)
        own = {**batch.get("buffers", self.model.buffers), **ctx.state["buffers"]}  # type: ignore[dict-item]
        return super().client_step(params, opt, {**batch, "buffers": own}, ctx)  # type: ignore[dict-item]

    def personal_buffers(self, client_state: Tree) -> Tensors:
        return dict(client_state["buffers"])
