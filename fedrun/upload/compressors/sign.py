"""``sign``: scaled sign, C(x) = (||x||_1 / d) sign(x) (EF-signSGD, Karimireddy et al. 2019, Algorithm 1): d + 32
bits."""

from __future__ import annotations

import torch

from fedrun.upload.base import COMPRESSORS, UploadContext
from fedrun.upload.compressors.base import Compressor


@COMPRESSORS.register("sign")
class Sign(Compressor):
    name = "sign"

    def compress(self, x: torch.Tensor, ctx: UploadContext) -> torch.Tensor:
        return x.abs().mean(dim=1, keepdim=True) * x.sign()

    def bits_per_client(self, dim: int) -> float | None:
        return dim + 32.0
