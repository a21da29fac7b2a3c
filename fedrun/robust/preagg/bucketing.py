"""Bucketing (Karimireddy, He and Jaggi 2022, "Byzantine-robust learning on heterogeneous datasets via
bucketing", ICLR, Algorithm 1): shuffle the n uploads at random, cut them into ceil(n/s) buckets of s (the last
one holds the rest), average each bucket, and give the bucket means to the defence. A Byzantine upload taints at
most one bucket, so the defence after it tolerates f' = min(f, ceil(n/s)) Byzantine of ceil(n/s).

s = 2: the paper's experiments (epfml/byzantine-robust-noniid-optimizer, ``exp1.py``: bucketing in {0, 2}).
s = 1 is the identity (no shuffle: a bucket of one is its upload). The shuffle is drawn from the round's keyed
generator (:attr:`ServerView.generator`), never the global RNG. A bucket's aggregation weight is the sum of its
uploads'; its mean is the plain mean (the paper's).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from fedrun.config.registry import positive
from fedrun.robust.base import PREAGGREGATORS, Mixed, PreAggregator, ServerView


@dataclass
class BucketingParams:
    """``s``: the bucket size."""

    s: int = 2  # bucket size (Karimireddy et al. 2022's experiments: s = 2)

    def __post_init__(self) -> None:
        positive("s", self.s)


def bucket_mix(perm: torch.Tensor, s: int, dtype: torch.dtype) -> torch.Tensor:
    """The bucketing matrix [ceil(n/s), n]: row b puts 1/|bucket b| on the uploads perm[b s : (b + 1) s]."""
    n = perm.shape[0]
    rows = torch.arange(n) // s  # position in the permutation -> bucket
    size = torch.bincount(rows).to(dtype)
    mix = torch.zeros(int(rows[-1]) + 1, n, dtype=dtype)
    mix[rows, perm] = 1.0 / size[rows]
    return mix


def bucket_means(x: torch.Tensor, perm: torch.Tensor, s: int) -> torch.Tensor:
    """The means [ceil(n/s), d] of the buckets of s consecutive uploads of ``x`` [n, d] in the order ``perm``
    (one gather, no [n, n] product)."""
    n, d = x.shape
    full = n // s
    shuffled = x.index_select(0, perm.to(x.device))
    means = shuffled[: full * s].reshape(full, s, d).mean(dim=1)
    if full * s == n:
        return means
    return torch.cat([means, shuffled[full * s :].mean(dim=0, keepdim=True)])


@PREAGGREGATORS.register("bucketing", BucketingParams)
class Bucketing(PreAggregator):
    name = "bucketing"
    hp: BucketingParams

    def after(self, n: int, f: int) -> tuple[int, int]:
        buckets = -(-n // self.hp.s)
        return buckets, min(f, buckets)

    def __call__(self, x: torch.Tensor, view: ServerView) -> Mixed:
        n, s = x.shape[0], self.hp.s
        if s == 1:
            return Mixed(x, torch.eye(n, dtype=x.dtype, device=x.device), view)
        if view.generator is None:
            raise ValueError("bucketing's shuffle needs a keyed generator (ServerView.generator)")
        perm = torch.randperm(n, generator=view.generator)
        mix = bucket_mix(perm, s, x.dtype).to(x.device)
        weights = mix.ne(0).to(x.dtype) @ view.p(x)
        return Mixed(bucket_means(x, perm, s), mix, replace(view, f=self.after(n, view.f)[1], weights=weights))
