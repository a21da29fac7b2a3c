"""Inner-product manipulation (Xie, Koyejo and Gupta 2020, "Fall of empires: breaking Byzantine-tolerant SGD by
inner product manipulation", UAI, Sec. 4): every attacker sends -epsilon times the mean of the honest updates,
so that the aggregate's inner product with the true gradient turns negative. Omniscient in the paper (the
attackers know the honest updates); ``knowledge=own`` uses the mean of their own updates. epsilon = 0.1: the
small-epsilon attack of the paper, as run by Karimireddy et al. 2021/2022 (epfml/byzantine-robust-optimizer,
``cifar10-all.py``: ``IPMAttack(epsilon=0.1)``); ByzFL's ``InnerProductManipulation`` defaults to tau = 2.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedrun.config.registry import positive
from fedrun.robust.base import ATTACKS, AttackView, Knowledge, ModelAttack


@dataclass
class IPMParams:
    """``epsilon``: the scale of the negated honest mean; ``knowledge``: whose mean."""

    knowledge: Knowledge | None = None  # None: omniscient, Xie et al. 2020: the honest updates are known
    epsilon: float = 0.1  # Karimireddy et al.'s runs of the paper's attack; ByzFL: 2.0

    def __post_init__(self) -> None:
        positive("epsilon", self.epsilon)


@ATTACKS.register("ipm", IPMParams)
class IPM(ModelAttack):
    name = "ipm"
    paper_knowledge = "omniscient"
    hp: IPMParams

    def __call__(self, own: torch.Tensor, honest: torch.Tensor | None, view: AttackView) -> torch.Tensor:
        return (-self.hp.epsilon * self.reference(own, honest).mean(dim=0)).expand_as(own).clone()
