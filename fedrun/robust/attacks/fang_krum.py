"""Fang et al.'s attack on Krum (Fang, Cao, Jia and Gong 2020, "Local model poisoning attacks to Byzantine-robust
federated learning", USENIX Security, Sec. 3.3), on updates (w - w^t) rather than models: the global model's
change direction s = sign(mean of the known updates), and the crafted update -lambda s, with lambda the largest
value, halved from an upper bound until Krum over the known updates plus the a crafted ones selects a crafted
one (or lambda falls below eps = 1e-5):

    lambda_0 = 1 / ((n - 2a - 1) sqrt(d)) min_i sum_{l in G(i, n-a-2)} ||x_l - x_i|| + 1 / sqrt(d) max_i ||x_i||,

n the uploads of the round, a the attackers, G(i, k) the k known updates closest to x_i. Every attacker sends the
crafted update (the paper crafts the other c - 1 close to it; the FLTrust and Shejwalkar et al. codes send the same
one). ``knowledge=omniscient`` is the paper's full knowledge (the benign updates known); ``own`` its partial
knowledge (the attackers' own honest updates stand for them). Each Krum check is on an [n, n] matrix built from one
Gram product: ||-lambda s - x_i||^2 = lambda^2 ||s||^2 + 2 lambda <s, x_i> + ||x_i||^2.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from fedrun.config.registry import positive
from fedrun.robust.base import ATTACKS, AttackView, Knowledge, ModelAttack
from fedrun.robust.defences.krum import krum_scores
from fedrun.robust.distances import sq_dists


@dataclass
class FangKrumParams:
    """``knowledge``: full (omniscient) or partial (own); ``eps``: the smallest lambda tried."""

    knowledge: Knowledge | None = None  # None: omniscient, Fang et al. 2020: full knowledge (partial: own)
    eps: float = 1e-5  # the threshold on lambda (Fang et al. 2020, Sec. 3.3)

    def __post_init__(self) -> None:
        positive("eps", self.eps)


def lambda_bound(known: torch.Tensor, d2: torch.Tensor, n: int, a: int) -> float:
    """Fang et al.'s upper bound lambda_0 on the crafted update's scale."""
    d = known.shape[1]
    dist = d2.sqrt()
    k = max(1, min(known.shape[0] - 1, n - a - 2))
    others = dist + torch.diag(torch.full((dist.shape[0],), float("inf"), dtype=dist.dtype, device=dist.device))
    closest = others.topk(k, dim=1, largest=False).values.sum(dim=1).min()
    return float(closest / (max(1, n - 2 * a - 1) * math.sqrt(d)) + known.norm(dim=1).max() / math.sqrt(d))


def krum_picks_crafted(d2: torch.Tensor, to_crafted: torch.Tensor, a: int) -> bool:
    """Whether Krum (f = a) over the known updates (squared distances ``d2`` [h, h]) plus a copies of the crafted
    one (squared distances ``to_crafted`` [h] to it) selects a crafted update."""
    h = d2.shape[0]
    full = torch.zeros(h + a, h + a, dtype=d2.dtype, device=d2.device)
    full[:h, :h] = d2
    full[:h, h:] = to_crafted[:, None]
    full[h:, :h] = to_crafted[None, :]
    return int(krum_scores(full, a).argmin()) >= h


@ATTACKS.register("fang_krum", FangKrumParams)
class FangKrum(ModelAttack):
    name = "fang_krum"
    paper_knowledge = "omniscient"
    hp: FangKrumParams

    def __call__(self, own: torch.Tensor, honest: torch.Tensor | None, view: AttackView) -> torch.Tensor:
        known = self.reference(own, honest)
        a = own.shape[0]
        s = torch.sign(known.mean(dim=0))
        d2 = sq_dists(known)
        sq, proj, q = known.pow(2).sum(dim=1), known @ s, s.pow(2).sum()
        lam = lambda_bound(known, d2, view.n, a)
        while lam >= self.hp.eps:  # halvings of a scalar; each check is on the [n, n] matrix
            if krum_picks_crafted(d2, (lam * lam * q + 2 * lam * proj + sq).clamp_min(0.0), a):
                break
            lam /= 2
        return (-lam * s).expand_as(own).clone()
