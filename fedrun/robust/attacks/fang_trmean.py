"""Fang et al.'s attack on the trimmed mean, which also breaks the median (Fang, Cao, Jia and Gong 2020, USENIX
Security, Sec. 3.4), on updates: per coordinate j, with s_j = sign of the known updates' mean (the direction the
global model would move) and their largest and smallest values w_max,j and w_min,j, every attacker sends a value
drawn uniformly from

    s_j = -1:  [w_max,j, b w_max,j] if w_max,j > 0, else [w_max,j, w_max,j / b]
    s_j = +1:  [w_min,j / b, w_min,j] if w_min,j > 0, else [b w_min,j, w_min,j]

(b = 2; s_j = 0 sends 0, as FLTrust's ``trim_attack``): values at the honest extremes, on the side opposite to the
direction. That is full knowledge (``knowledge=omniscient``, the paper's). Partial knowledge (``own``) uses the mean
mu_j and standard deviation sigma_j of the attackers' own updates: [mu_j + 3 sigma_j, mu_j + 4 sigma_j] when
s_j = -1 and [mu_j - 4 sigma_j, mu_j - 3 sigma_j] when s_j = +1. The draws come from the round's keyed generator.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedrun.config.registry import in_range
from fedrun.robust.base import ATTACKS, AttackView, Knowledge, ModelAttack
from fedrun.robust.moments import coordinate_std


@dataclass
class FangTrimmedMeanParams:
    """``knowledge``: full (omniscient) or partial (own); ``b``: how far past the extremes the values go."""

    knowledge: Knowledge | None = None  # None: omniscient, Fang et al. 2020: full knowledge (partial: own)
    b: float = 2.0  # Fang et al. 2020, Sec. 3.4 (b = 2 in their experiments; FLTrust's code: 1 + U[0, 1))

    def __post_init__(self) -> None:
        in_range("b", self.b, 1.0, float("inf"), lo_open=True, why="b = 1 sends the extremes themselves")


def full_knowledge(known: torch.Tensor, b: float, u: torch.Tensor) -> torch.Tensor:
    """The crafted values [a, d] from the known updates [h, d] and uniform draws ``u`` [a, d]."""
    s = torch.sign(known.mean(dim=0))
    w_max, w_min = known.max(dim=0).values, known.min(dim=0).values
    edge = torch.where(s < 0, w_max, w_min)  # the extreme on the side opposite to the direction
    # the interval [edge, edge * b] or [edge / b, edge], oriented away from the direction s
    far = torch.where((s < 0) == (edge > 0), edge * b, edge / b)
    return torch.where(s == 0, torch.zeros_like(edge), edge + u * (far - edge))


def partial_knowledge(own: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """The crafted values [a, d] from the attackers' own updates: mu -+ (3 + u) sigma against the direction."""
    mu = own.mean(dim=0)
    sigma = coordinate_std(own, mu)
    return mu - torch.sign(mu) * (3.0 + u) * sigma


@ATTACKS.register("fang_trmean", FangTrimmedMeanParams)
class FangTrimmedMean(ModelAttack):
    name = "fang_trmean"
    paper_knowledge = "omniscient"
    hp: FangTrimmedMeanParams

    def __call__(self, own: torch.Tensor, honest: torch.Tensor | None, view: AttackView) -> torch.Tensor:
        if view.generator is None:
            raise ValueError("fang_trmean needs a keyed generator (AttackView.generator)")
        u = torch.rand(own.shape, generator=view.generator, dtype=own.dtype).to(own.device)
        if self.knowledge == "own":
            return partial_knowledge(own, u)
        return full_knowledge(self.reference(own, honest), self.hp.b, u)
