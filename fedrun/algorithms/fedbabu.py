"""FedBABU (Oh et al. ICLR 2022): the body is learned federatedly with the head frozen at its random
initialisation; personalisation is fine-tuning at evaluation.

During training only the body is updated and averaged ("body update" and "body aggregation", Sec. 4, Algorithm
1); the head is never trained and never sent. The personalised model of the paper is the global model
fine-tuned on each client's data: ``eval.finetune_steps=k`` (with ``eval.local_test``), which every method has.
"""

from __future__ import annotations

import torch

from fedrun.algorithms.base import ClientContext
from fedrun.algorithms.personal import HeadParams, SplitModel
from fedrun.config.registry import ALGORITHMS
from fedrun.config.schema import FLConfig
from fedrun.core.tree import Tensors
from fedrun.models.base import FunctionalModel


@ALGORITHMS.register("fedbabu", HeadParams)
class FedBABU(SplitModel):
    """The head stays at its initialisation on every client and the server; the body is FedAvg."""

    stacks = True  # (tests/engines/test_stacked.py)

    hp: HeadParams
    personal = False  # no personal state: the personalised model is the fine-tuned global one

    def __init__(self, hp: HeadParams, fl: FLConfig, model: FunctionalModel) -> None:
        super().__init__(hp, fl, model)
        self.head = set(model.head_keys(hp.head))
        self.keep([])
        self.shared = [k for k in self.shared if k not in self.head]

    def trainable(self, w: Tensors, ctx: ClientContext) -> dict[str, torch.Tensor | bool]:
        return {k: k not in self.head for k in w}
