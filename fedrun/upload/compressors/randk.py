"""``randk``: keep k entries drawn uniformly without replacement (Stich et al. 2018, rand_k), unscaled (the
contraction of their analysis); the indices come from a seed keyed by (seed, round, client) that the server
regenerates, so the client sends k * 32 bits."""

from __future__ import annotations

import torch

from fedrun.upload.base import COMPRESSORS, UploadContext
from fedrun.upload.compressors.base import Sparsifier


@COMPRESSORS.register("randk")
class RandK(Sparsifier):
    name = "randk"

    def compress(self, x: torch.Tensor, ctx: UploadContext) -> torch.Tensor:
        k = self.k_of(x.shape[1])
        rows = [torch.randperm(x.shape[1], generator=ctx.generator(self.name, int(c)))[:k] for c in ctx.clients]
        idx = torch.stack(rows).to(x.device)
        return torch.zeros_like(x).scatter_(1, idx, x.gather(1, idx))

    def bits_per_client(self, dim: int) -> float | None:
        return self.k_of(dim) * 32.0
