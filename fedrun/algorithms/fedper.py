"""FedPer (Arivazhagan et al. 2019) and LG-FedAvg (Liang et al. 2020): one model split into a shared and a
personal part.

FedPer: "base + personalization layers": the base (body) is trained by every client and averaged by FedAvg, the
personalization layers (head) stay on each client (Sec. 3, Algorithm 1). LG-FedAvg is the converse: each client
keeps its local representation (the body) and only the global head is averaged ("local and global" layers,
Sec. 3). The split is the model's declaration (its last layer is the head) or ``algorithm.head``.
"""

from __future__ import annotations

from fedrun.algorithms.personal import HeadParams, SplitModel
from fedrun.config.registry import ALGORITHMS
from fedrun.config.schema import FLConfig
from fedrun.models.base import FunctionalModel


@ALGORITHMS.register("fedper", HeadParams)
class FedPer(SplitModel):
    """The head is personal, the body shared; an empty head (``algorithm.head=[]``) is FedAvg."""

    hp: HeadParams

    def __init__(self, hp: HeadParams, fl: FLConfig, model: FunctionalModel) -> None:
        super().__init__(hp, fl, model)
        self.keep(model.head_keys(hp.head))


@ALGORITHMS.register("lg_fedavg", HeadParams)
class LGFedAvg(SplitModel):
    """The body (local representation) is personal, the head shared."""

    hp: HeadParams

    def __init__(self, hp: HeadParams, fl: FLConfig, model: FunctionalModel) -> None:
        super().__init__(hp, fl, model)
        head = set(model.head_keys(hp.head))
        self.keep([k for k, _ in model.module.named_parameters() if k not in head])
