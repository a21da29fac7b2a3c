"""Krum and Multi-Krum (Blanchard, El Mhamdi, Guerraoui and Stainer 2017, "Machine learning with adversaries:
Byzantine tolerant gradient descent", Sec. 4).

Each upload's score is the sum of its squared distances to its n - f - 2 closest other uploads,
s(i) = sum_{i -> j} ||x_i - x_j||^2; Krum returns the upload of least score, Multi-Krum the average of the m
uploads of least scores (Blanchard et al., Sec. 5; m = n - f unset, as ByzFL and Allouah et al. 2023). Krum
needs n > 2f + 2 (their Proposition 1). All pairwise distances are one Gram matrix
(:func:`fedrun.robust.distances.sq_dists`).

``neighbours``: ``n-f-2`` is the paper's; ``n-f-1`` is ByzFL's (its ``Krum``/``MultiKrum`` average the n - f - 1
nearest), a named option for comparison. Multi-Krum's average is the paper's plain mean of the kept uploads;
``weighted`` renormalises the round's aggregation weights p_i over them instead (Flower's variant).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from fedrun.config.registry import positive
from fedrun.robust.base import DEFENCES, Aggregate, Defence, ServerView, finite_rows
from fedrun.robust.distances import sq_dists

Neighbours = Literal["n-f-2", "n-f-1"]


@dataclass
class KrumParams:
    """``neighbours``: how many closest uploads a score sums (``n-f-2``: Blanchard et al. 2017; ``n-f-1``: ByzFL)."""

    neighbours: Neighbours = "n-f-2"  # Blanchard et al. 2017 Sec. 4 (i -> j: the n - f - 2 closest); n-f-1: ByzFL's


@dataclass
class MultiKrumParams(KrumParams):
    """``m``: the uploads averaged (unset: n - f); ``weighted``: average them with their aggregation weights."""

    m: int | None = None  # the m best-scored uploads averaged (Blanchard et al. 2017 Sec. 5); None: n - f (ByzFL)
    weighted: bool = False  # False: the paper's plain mean of the kept; True: p_i renormalised over them (Flower)

    def __post_init__(self) -> None:
        positive("m", self.m)


def krum_scores(d2: torch.Tensor, f: int, neighbours: Neighbours = "n-f-2") -> torch.Tensor:
    """Each upload's score [n] from the squared distances ``d2`` [n, n]: the sum over its k closest others,
    k = n - f - 2 (or n - f - 1), at least 1."""
    n = d2.shape[0]
    k = max(1, min(n - 1, n - f - (2 if neighbours == "n-f-2" else 1)))
    others = d2 + torch.diag(torch.full((n,), float("inf"), dtype=d2.dtype, device=d2.device))
    return others.topk(k, dim=1, largest=False).values.sum(dim=1)


def multi_krum_selection(x: torch.Tensor, f: int, m: int, neighbours: Neighbours = "n-f-2") -> torch.Tensor:
    """The indices of the ``m`` uploads of least Krum score, best first (ties: the lower index)."""
    scores = krum_scores(sq_dists(x), f, neighbours)
    return torch.sort(scores, stable=True).indices[:m]


class _KrumBase(Defence):
    decides = True
    hp: KrumParams

    def min_uploads(self, f: int) -> int:
        return 2 * f + 3

    def _result(self, x: torch.Tensor, keep: torch.Tensor, w: torch.Tensor) -> Aggregate:
        weights = torch.zeros(x.shape[0], dtype=x.dtype, device=x.device).index_copy_(0, keep, w)
        # a dropped row of inf would turn 0 * inf into nan: such rows are zeroed (one matvec, no copy of the kept)
        value = weights @ finite_rows(x)[0]
        return Aggregate(value, weights=weights, selected=weights > 0)


@DEFENCES.register("krum", KrumParams)
class Krum(_KrumBase):
    name = "krum"

    def __call__(self, x: torch.Tensor, view: ServerView) -> Aggregate:
        keep = multi_krum_selection(x, view.f, 1, self.hp.neighbours)
        return self._result(x, keep, torch.ones(1, dtype=x.dtype, device=x.device))


@DEFENCES.register("multi_krum", MultiKrumParams)
class MultiKrum(_KrumBase):
    name = "multi_krum"
    hp: MultiKrumParams

    def refuse(self, n: int, f: int) -> str | None:
        if self.hp.m is not None and self.hp.m > n - f:
            return f"multi_krum averages m={self.hp.m} uploads, more than the n - f = {n - f} honest ones"
        return super().refuse(n, f)

    def __call__(self, x: torch.Tensor, view: ServerView) -> Aggregate:
        n = x.shape[0]
        k = min(self.hp.m if self.hp.m is not None else n - view.f, n)
        keep = multi_krum_selection(x, view.f, k, self.hp.neighbours)
        if self.hp.weighted:
            w = view.p(x)[keep]
            w = w / w.sum()
        else:
            w = torch.full((k,), 1.0 / k, dtype=x.dtype, device=x.device)
        return self._result(x, keep, w)
