"""Pairwise distances of a cohort's uploads by one matrix product.

||x_i - x_j||^2 = ||x_i||^2 + ||x_j||^2 - 2 <x_i, x_j>: the Gram matrix G = X X^T is one [m, d] x [d, m] product
(BLAS; no [m, m, d] differences, no copy of the uploads), and ||x_i||^2 is its diagonal. The result is clamped at
0 and its diagonal is 0. The terms are taken about the origin, not the cohort's mean: uploads are updates
w_i - w^t, which sit near it, and an attacker's far-away upload then perturbs only its own row's distances (its
pull on the mean would shift every row). A row with a non-finite entry (an attacker's inf or nan; or entries so
large that its squared norm overflows) is at distance inf from every other row, so a distance-based rule ranks it
last instead of turning the distances into nan.
"""

from __future__ import annotations

import torch


def sq_dists(x: torch.Tensor) -> torch.Tensor:
    """The squared Euclidean distances [m, m] between the rows of ``x`` [m, d]."""
    gram = x @ x.T
    sq = gram.diagonal().clone()
    bad = ~torch.isfinite(sq)
    d2 = (sq[:, None] + sq[None, :] - 2.0 * gram).clamp_min_(0.0)
    if bool(bad.any()):
        d2.masked_fill_(bad[:, None] | bad[None, :], float("inf"))
    d2.fill_diagonal_(0.0)
    return d2
