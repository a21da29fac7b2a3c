"""Bulyan (El Mhamdi, Guerraoui and Rouault 2018, "The hidden vulnerability of distributed learning in
Byzantium", Sec. 4, Algorithm 2), over Krum.

1. Selection: apply Krum recursively theta = n - 2f times, each time to the uploads not yet selected, moving the
   one it picks into the selection set S (|S| = theta).
2. Aggregation: for each coordinate j, average the beta = theta - 2f values of S closest to S's median at j.

It needs n >= 4f + 3. The theta Krum steps work on the [n, n] distance matrix computed once (one Gram product):
no step reads the d-dimensional uploads. Krum's score in a step sums the r - f - 2 closest of the r uploads left
(at least one: the last steps of a cohort of exactly 4f + 3 leave fewer).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedrun.robust.base import DEFENCES, Aggregate, Defence, ServerView
from fedrun.robust.defences.median import coordinate_median
from fedrun.robust.distances import sq_dists


@dataclass
class BulyanParams:
    """No settings: theta = n - 2f and beta = theta - 2f follow from f (El Mhamdi et al. 2018)."""


def bulyan_selection(d2: torch.Tensor, f: int) -> torch.Tensor:
    """The theta = n - 2f indices recursive Krum selects, in the order selected, from squared distances [n, n]."""
    n = d2.shape[0]
    inf = torch.tensor(float("inf"), dtype=d2.dtype, device=d2.device)
    left = torch.ones(n, dtype=torch.bool, device=d2.device)
    chosen = []
    for step in range(n - 2 * f):  # theta Krum steps on the [n, n] matrix, no [d] work
        r = n - step
        k = max(1, min(r - 1, r - f - 2))
        pair_ok = left[:, None] & left[None, :]
        pair_ok.fill_diagonal_(False)
        scores = torch.where(pair_ok, d2, inf).topk(k, dim=1, largest=False).values.sum(dim=1)
        i = int(torch.where(left, scores, inf).argmin())
        chosen.append(i)
        left[i] = False
    return torch.tensor(chosen, dtype=torch.long, device=d2.device)


def closest_to_median_mean(s: torch.Tensor, beta: int) -> torch.Tensor:
    """Per coordinate, the mean of the ``beta`` values of ``s`` [theta, d] closest to their median."""
    dev = (s - coordinate_median(s)).abs()
    idx = dev.topk(beta, dim=0, largest=False).indices
    return s.gather(0, idx).mean(dim=0)


@DEFENCES.register("bulyan", BulyanParams)
class Bulyan(Defence):
    name = "bulyan"
    decides = True

    def min_uploads(self, f: int) -> int:
        return 4 * f + 3

    def __call__(self, x: torch.Tensor, view: ServerView) -> Aggregate:
        n, f = x.shape[0], view.f
        chosen = bulyan_selection(sq_dists(x), f)
        theta = n - 2 * f
        value = closest_to_median_mean(x.index_select(0, chosen), theta - 2 * f)
        selected = torch.zeros(n, dtype=torch.bool, device=x.device).index_fill_(0, chosen, True)
        return Aggregate(value, selected=selected)
