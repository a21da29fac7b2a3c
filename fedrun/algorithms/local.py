"""Local-only training: every client trains its own model on its own data and never communicates.

The baseline every personalised-FL paper reports ("Local", e.g. FedRep Table 1, Ditto Table 2, PFLlib's
``Local``). Each client's whole model is its personal state, nothing is sent either way, and the global
model stays the initial one.
"""

from __future__ import annotations

from fedrun.algorithms.base import AlgoParams
from fedrun.algorithms.personal import SplitModel
from fedrun.config.registry import ALGORITHMS
from fedrun.config.schema import FLConfig
from fedrun.models.base import FunctionalModel


@ALGORITHMS.register("local", AlgoParams)
class Local(SplitModel):
    """Every parameter is personal: local SGD from the client's own last model, no upload, no aggregation."""

    stacks = True  # (tests/engines/test_stacked.py)

    def __init__(self, hp: AlgoParams, fl: FLConfig, model: FunctionalModel) -> None:
        super().__init__(hp, fl, model)
        self.keep([k for k, _ in model.module.named_parameters()])
