"""``topk``: keep the k entries of largest |x_j| (Stich et al. 2018, "Sparsified SGD with memory", top_k); the client
sends k values and k indices: k * (32 + ceil(log2 d)) bits."""

from __future__ import annotations

import math

import torch

from fedrun.upload.base import COMPRESSORS, UploadContext
from fedrun.upload.compressors.base import Sparsifier


@COMPRESSORS.register("topk")
class TopK(Sparsifier):
    name = "topk"

    def compress(self, x: torch.Tensor, ctx: UploadContext) -> torch.Tensor:
        k = self.k_of(x.shape[1])
        idx = x.abs().topk(k, dim=1, sorted=False).indices
        return torch.zeros_like(x).scatter_(1, idx, x.gather(1, idx))

    def bits_per_client(self, dim: int) -> float | None:
        return float(self.k_of(dim) * (32 + math.ceil(math.log2(max(dim, 2)))))
