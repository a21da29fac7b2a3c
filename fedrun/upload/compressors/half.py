"""``half``: each entry of the update sent as an IEEE 754 half-precision float (float16): 16 bits an entry instead of
32, rounding each entry to the nearest float16 (entries beyond float16's range, 65504, become inf: an update that
large has diverged). The low-precision baseline of upload compression."""

from __future__ import annotations

import torch

from fedrun.upload.base import COMPRESSORS, UploadContext
from fedrun.upload.compressors.base import Compressor


@COMPRESSORS.register("half")
class Half(Compressor):
    name = "half"

    def compress(self, x: torch.Tensor, ctx: UploadContext) -> torch.Tensor:
        return x.half().float()

    def bits_per_client(self, dim: int) -> float | None:
        return 16.0 * dim
