"""FedPer (Arivazhagan et al. 2019): one model split into a shared body and a personal head.

"base + personalization layers": the base (body) is trained by every client and averaged by FedAvg, the
personalization layers (head) stay on each client (Sec. 3, Algorithm 1). The split is the model's declaration
(its last layer is the head) or ``algorithm.head``; a split with an empty side is refused. LG-FedAvg, the
converse split, is in lg_fedavg.py.
"""

from __future__ import annotations

from fedrun.algorithms.personal import HeadParams, SplitModel
from fedrun.config.registry import ALGORITHMS
from fedrun.config.schema import FLConfig
from fedrun.models.base import FunctionalModel


@ALGORITHMS.register("fedper", HeadParams)
class FedPer(SplitModel):
    """The head is personal, the body shared."""

    stacks = True  # (tests/engines/test_stacked.py)

    hp: HeadParams

    def __init__(self, hp: HeadParams, fl: FLConfig, model: FunctionalModel) -> None:
        super().__init__(hp, fl, model)
        self.keep_split(model.head_keys(hp.head), "personal head", "shared body")
