"""Pairwise distances of a cohort's uploads by one matrix product.

||x_i - x_j||^2 = ||x_i||^2 + ||x_j||^2 - 2 <x_i, x_j>: the Gram matrix X X^T is one [m, d] x [d, m] product
(BLAS), where a per-pair difference would read the [m, m, d] differences. The rows are first centred on their
mean (distances do not change under a translation), which keeps the cancellation of the three terms small when
the uploads sit far from the origin but close to each other; the result is clamped at 0 and its diagonal is 0.
A row with a non-finite entry (an attacker's inf or nan) is at distance inf from every other row, so a
distance-based rule ranks it last instead of turning every distance into nan.
"""

from __future__ import annotations

import torch


def sq_dists(x: torch.Tensor) -> torch.Tensor:
    """The squared Euclidean distances [m, m] between the rows of ``x`` [m, d]."""
    finite = torch.isfinite(x).all(dim=1)
    if bool(finite.all()):
        c = x - x.mean(dim=0, keepdim=True)
    else:
        x = torch.where(finite[:, None], x, torch.zeros_like(x))
        c = x - x.sum(dim=0, keepdim=True) / finite.sum().clamp_min(1)
    sq = c.pow(2).sum(dim=1)
    d2 = (sq[:, None] + sq[None, :] - 2.0 * (c @ c.T)).clamp_min_(0.0)
    bad = ~finite
    d2.masked_fill_(bad[:, None] | bad[None, :], float("inf"))
    d2.fill_diagonal_(0.0)
    return d2


def sq_dists_to(x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """The squared distances [m] of the rows of ``x`` [m, d] to one point ``z`` [d]."""
    return (x - z).pow(2).sum(dim=1)
