"""A Little Is Enough (Baruch, Baruch and Goldberg 2019, NeurIPS, Sec. 3, Algorithm 3): every attacker sends
mu + z sigma, mu and sigma the coordinate-wise mean and standard deviation of the updates it can see, with

    s = floor(n/2 + 1) - m,   z_max = max z such that Phi(z) < (n - s) / n,

n the uploads of the round, m the attackers among them (s: the honest "supporters" the attack needs for a
majority; s is at least 1 here, as when the attackers alone are a majority). The attack is non-omniscient in the
paper: mu and sigma come from the attackers' own honestly trained updates (``knowledge=own``);
``omniscient`` takes them from the round's honest updates (Karimireddy et al. 2022's and ByzFL's
``ALittleIsEnough``, whose z is a setting, 1.5 by default). sigma is the unbiased standard deviation (0 from a
single update). Karimireddy et al.'s code sends mu - z sigma with z from (n - m - s) / (n - m): ``z`` sets z
directly, its sign included.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from fedrun.robust.base import ATTACKS, AttackView, Knowledge, ModelAttack
from fedrun.robust.moments import coordinate_moments


@dataclass
class ALIEParams:
    """``knowledge``: where mu and sigma come from; ``z``: unset, Baruch et al.'s z_max from n and m."""

    knowledge: Knowledge | None = None  # None: own (Baruch et al. 2019: the corrupted workers' own updates)
    z: float | None = None  # None: z_max (Baruch et al. 2019, Sec. 3); ByzFL's default tau = 1.5


def z_max(n: int, m: int) -> float:
    """Baruch et al.'s z_max for n uploads of which m the attackers': Phi^{-1}((n - s) / n)."""
    s = max(1, math.floor(n / 2 + 1) - m)
    p = torch.tensor((n - s) / n, dtype=torch.float64)
    return float(torch.special.ndtri(p))


def alie(reference: torch.Tensor, z: float) -> torch.Tensor:
    """mu + z sigma [d] of the rows of ``reference`` [r, d] (sigma: unbiased std; 0 when r = 1)."""
    mu, sigma = coordinate_moments(reference)
    return mu + z * sigma


@ATTACKS.register("alie", ALIEParams)
class ALIE(ModelAttack):
    name = "alie"
    paper_knowledge = "own"
    hp: ALIEParams

    def __call__(self, own: torch.Tensor, honest: torch.Tensor | None, view: AttackView) -> torch.Tensor:
        z = self.hp.z if self.hp.z is not None else z_max(view.n, own.shape[0])
        return alie(self.reference(own, honest), z).expand_as(own).clone()
