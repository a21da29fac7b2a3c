"""``qsgd``: QSGD's stochastic quantisation with s = ``compression.levels`` levels (Alistarh et al. 2017, eq. (2)-(3)):
Q_s(x)_j = ||x||_2 sign(x_j) xi_j(x, s), xi_j = (l + 1)/s w.p. |x_j| s/||x||_2 - l, else l/s, with
l = floor(|x_j| s/||x||_2); unbiased. Bits: 32 for the norm, and for each entry its sign and a level of 0..s:
32 + d * (1 + ceil(log2(s + 1))) (fixed-width coding, not the paper's Elias coding)."""

from __future__ import annotations

import math

import torch

from fedrun.upload.base import COMPRESSORS, UploadContext
from fedrun.upload.compressors.base import Compressor


@COMPRESSORS.register("qsgd")
class QSGD(Compressor):
    name = "qsgd"

    def compress(self, x: torch.Tensor, ctx: UploadContext) -> torch.Tensor:
        s = self.cfg.levels
        norm = x.norm(dim=1, keepdim=True)
        level = x.abs() / norm.clamp_min(torch.finfo(x.dtype).tiny) * s
        low = level.floor()
        u = torch.stack([torch.rand(x.shape[1], generator=ctx.generator(self.name, int(c))) for c in ctx.clients])
        xi = (low + (u.to(x.device) < level - low).to(x.dtype)) / s
        out: torch.Tensor = norm * x.sign() * xi
        return out

    def bits_per_client(self, dim: int) -> float | None:
        return 32.0 + dim * (1 + math.ceil(math.log2(self.cfg.levels + 1)))
