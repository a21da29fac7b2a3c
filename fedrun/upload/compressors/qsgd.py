"""``qsgd``: QSGD's stochastic quantisation with s = ``compression.levels`` levels (Alistarh et al. 2017, eq. (2)-(3)):
Q_s(x)_j = ||x||_2 sign(x_j) xi_j(x, s), xi_j = (l + 1)/s w.p. |x_j| s/||x||_2 - l, else l/s, with
l = floor(|x_j| s/||x||_2); unbiased.

Bucketing (their sec. 4, "QSGD Variants"): the row is cut into buckets of d = ``compression.bucket`` consecutive
entries, each quantised independently with its own norm (the last bucket may be shorter), so that the variance bound
of their Lemma 3.1 is in d, not in the row's length. The default d = 512 is their experiments' (sec. 5: 4-bit and
8-bit QSGD with 512 bucket size; 2-bit with 128); ``compression.bucket=null`` (or d at least the row's length) is
whole-vector QSGD, bit for bit as before the key existed. Unlike the paper's runs, each bucket is scaled by its
2-norm (theirs by its max, sec. 4), buckets run across layer boundaries (they reshape so that no receptive field is
split) and small tensors are quantised too (they leave those under 10K entries dense).

Bits: 32 for each bucket's norm, and for each entry its sign and a level of 0..s:
32 ceil(n / d) + n (1 + ceil(log2(s + 1))) for a row of n entries (fixed-width coding, not the paper's Elias coding).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from fedrun.core.errors import ConfigError
from fedrun.upload.base import COMPRESSORS, UploadContext
from fedrun.upload.compressors.base import Compressor

if TYPE_CHECKING:
    from fedrun.upload.settings import CompressionSettings

BUCKET = 512  # Alistarh et al. 2017, sec. 5: the bucket size of their 4-bit and 8-bit runs


@dataclass(frozen=True)
class QSGDParams:
    """``bucket``: d, the entries quantised with one norm (Alistarh et al. 2017, sec. 4); null: the whole row."""

    bucket: int | None = BUCKET  # Alistarh et al. 2017, sec. 5 (4- and 8-bit runs); null: whole-vector QSGD

    def __post_init__(self) -> None:
        b = self.bucket
        if b is not None and (isinstance(b, bool) or not isinstance(b, int) or b < 1):
            raise ConfigError("bucket", f"qsgd's bucket size d, got {b!r}; valid: a whole number >= 1, or null")


@COMPRESSORS.register("qsgd", QSGDParams)
class QSGD(Compressor):
    name = "qsgd"

    def __init__(self, cfg: CompressionSettings) -> None:
        super().__init__(cfg)
        self.bucket: int | None = getattr(cfg, "bucket", BUCKET)

    def _buckets(self, n: int) -> int:
        """Buckets of a row of ``n`` entries (1: the whole row)."""
        return 1 if self.bucket is None or self.bucket >= n else -(-n // self.bucket)

    def _norms(self, x: torch.Tensor) -> torch.Tensor:
        """Each entry's bucket norm: [m, 1] for whole rows, else [m, n] (each bucket's 2-norm over its entries)."""
        m, n = x.shape
        k = self._buckets(n)
        if k == 1:
            whole: torch.Tensor = x.norm(dim=1, keepdim=True)
            return whole
        assert self.bucket is not None
        padded = torch.nn.functional.pad(x, (0, k * self.bucket - n))  # zeros add nothing to a norm
        norms: torch.Tensor = padded.view(m, k, self.bucket).norm(dim=2, keepdim=True)
        return norms.expand(m, k, self.bucket).reshape(m, k * self.bucket)[:, :n]

    def compress(self, x: torch.Tensor, ctx: UploadContext) -> torch.Tensor:
        s = self.cfg.levels
        norm = self._norms(x)
        level = x.abs() / norm.clamp_min(torch.finfo(x.dtype).tiny) * s
        low = level.floor()
        u = torch.stack([torch.rand(x.shape[1], generator=ctx.generator(self.name, int(c))) for c in ctx.clients])
        xi = (low + (u.to(x.device) < level - low).to(x.dtype)) / s
        out: torch.Tensor = norm * x.sign() * xi
        return out

    def bits_per_client(self, dim: int) -> float | None:
        return 32.0 * self._buckets(dim) + dim * (1 + math.ceil(math.log2(self.cfg.levels + 1)))
