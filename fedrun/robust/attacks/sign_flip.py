"""Sign flipping: an attacker sends its update negated, -s x_i (the sign-flipping attack of Li, Xu, Chen,
Giannakis and Ling 2019, RSA, AAAI; Allen-Zhu, Ebrahimian, Li and Alistarh 2021); ``knowledge=omniscient`` sends
the negated mean of the round's honest updates instead (ByzFL's ``SignFlipping``). s = 1."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedrun.config.registry import positive
from fedrun.robust.base import ATTACKS, AttackView, Knowledge, ModelAttack


@dataclass
class SignFlipParams:
    """``knowledge``: ``own`` negates each attacker's update; ``omniscient`` sends the negated honest mean."""

    knowledge: Knowledge | None = None  # None: own, own: -x_i (Li et al. 2019); omniscient: -honest mean (ByzFL)
    scale: float = 1.0  # s in -s x_i

    def __post_init__(self) -> None:
        positive("scale", self.scale)


@ATTACKS.register("sign_flip", SignFlipParams)
class SignFlip(ModelAttack):
    name = "sign_flip"
    paper_knowledge = "own"
    hp: SignFlipParams

    def __call__(self, own: torch.Tensor, honest: torch.Tensor | None, view: AttackView) -> torch.Tensor:
        if self.knowledge == "own":
            return -self.hp.scale * own
        return (-self.hp.scale * self.reference(own, honest).mean(dim=0)).expand_as(own).clone()
