"""Compression of the clients' uploads, each compressor with optional client-side error feedback.

Compressors C (applied to each client's row x of the cohort's [m, d] updates):

- ``topk``: keep the k entries of largest |x_j| (Stich et al. 2018, "Sparsified SGD with memory", top_k);
  the client sends k values and k indices: k * (32 + ceil(log2 d)) bits.
- ``randk``: keep k entries drawn uniformly without replacement (Stich et al. 2018, rand_k), unscaled (the
  contraction of their analysis); the indices come from a seed keyed by (seed, round, client) that the
  server regenerates, so the client sends k * 32 bits.
- ``qsgd``: QSGD's stochastic quantisation with s levels (Alistarh et al. 2017, eq. (2)-(3)):
  Q_s(x)_j = ||x||_2 sign(x_j) xi_j(x, s), xi_j = (l + 1)/s w.p. |x_j| s/||x||_2 - l, else l/s, with
  l = floor(|x_j| s/||x||_2); unbiased. Bits: 32 for the norm, and for each entry its sign and a level of
  0..s: 32 + d * (1 + ceil(log2(s + 1))) (fixed-width coding, not the paper's Elias coding).
- ``sign``: scaled sign, C(x) = (||x||_1 / d) sign(x) (EF-signSGD, Karimireddy et al. 2019, Algorithm 1):
  d + 32 bits.

Error feedback (Karimireddy et al. 2019, Algorithm 2; Stich et al. 2018, eq. (6)): the client compresses
p_i = delta_i + e_i, sends C(p_i) and keeps e_i <- p_i - C(p_i), so what one round drops is sent later. e_i is
persistent client state (one float32 row per client and upload part), checkpointed with the others.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

from fedrun.core.errors import ConfigError
from fedrun.upload.base import UPLOAD_STAGES, UploadContext, UploadStage

if TYPE_CHECKING:
    from fedrun.config.schema import CompressionConfig, RunSpec


class Compressor(UploadStage):
    """A compressor C with optional error feedback; subclasses define :meth:`compress` and the bits it sends."""

    def __init__(self, cfg: CompressionConfig) -> None:
        self.cfg = cfg
        self.stateful = cfg.error_feedback

    @classmethod
    def from_spec(cls, spec: RunSpec) -> UploadStage | None:
        return cls(spec.compression) if spec.compression.name == cls.name else None

    def compress(self, x: torch.Tensor, ctx: UploadContext) -> torch.Tensor:
        """C applied to every row of ``x`` [m, d]."""
        raise NotImplementedError

    def apply(
        self, delta: torch.Tensor, state: torch.Tensor | None, ctx: UploadContext
    ) -> tuple[torch.Tensor, torch.Tensor | None, dict[str, float]]:
        p = delta + state if state is not None else delta  # p_i = delta_i + e_i
        sent = self.compress(p, ctx)
        new_state = p - sent if state is not None else None  # e_i <- p_i - C(p_i)
        lost = (p - sent).norm(dim=1) / p.norm(dim=1).clamp_min(1e-12)
        diag = {f"{self.name}_rel_error": float(lost.mean())}
        if new_state is not None:
            diag[f"{self.name}_residual_norm"] = float(new_state.norm(dim=1).mean())
        return sent, new_state, diag


class Sparsifier(Compressor):
    """top-k and random-k: k entries of the model's update (``compression.k``, else ceil(ratio * d)); an extra
    upload part of d' entries keeps the same share, ceil(k d' / d)."""

    model_dim = 0  # d, the model update's entries (set by :meth:`check`)

    def check(self, dim: int, part: str) -> None:
        if part == "params":
            self.model_dim = dim
            if self.cfg.k is not None and self.cfg.k > dim:
                raise ConfigError(
                    "compression.k",
                    f"{self.cfg.k} is more than the {dim} entries of the model's update; valid: 1..{dim}",
                )

    def k_of(self, dim: int) -> int:
        """The entries kept of an upload part of ``dim`` floats."""
        if self.cfg.k is not None and self.model_dim:
            return max(1, -(-self.cfg.k * dim // self.model_dim))
        return max(1, math.ceil(self.cfg.ratio * dim))


@UPLOAD_STAGES.register("topk")
class TopK(Sparsifier):
    name = "topk"

    def compress(self, x: torch.Tensor, ctx: UploadContext) -> torch.Tensor:
        k = self.k_of(x.shape[1])
        idx = x.abs().topk(k, dim=1, sorted=False).indices
        return torch.zeros_like(x).scatter_(1, idx, x.gather(1, idx))

    def bits_per_client(self, dim: int) -> float | None:
        return self.k_of(dim) * (32 + math.ceil(math.log2(max(dim, 2))))


@UPLOAD_STAGES.register("randk")
class RandK(Sparsifier):
    name = "randk"

    def compress(self, x: torch.Tensor, ctx: UploadContext) -> torch.Tensor:
        k = self.k_of(x.shape[1])
        rows = [torch.randperm(x.shape[1], generator=ctx.generator(self.name, int(c)))[:k] for c in ctx.clients]
        idx = torch.stack(rows).to(x.device)
        return torch.zeros_like(x).scatter_(1, idx, x.gather(1, idx))

    def bits_per_client(self, dim: int) -> float | None:
        return self.k_of(dim) * 32.0


@UPLOAD_STAGES.register("qsgd")
class QSGD(Compressor):
    name = "qsgd"

    def compress(self, x: torch.Tensor, ctx: UploadContext) -> torch.Tensor:
        s = self.cfg.levels
        norm = x.norm(dim=1, keepdim=True)
        level = x.abs() / norm.clamp_min(torch.finfo(x.dtype).tiny) * s
        low = level.floor()
        u = torch.stack([torch.rand(x.shape[1], generator=ctx.generator(self.name, int(c))) for c in ctx.clients])
        xi = (low + (u.to(x.device) < level - low).to(x.dtype)) / s
        return norm * x.sign() * xi

    def bits_per_client(self, dim: int) -> float | None:
        return 32.0 + dim * (1 + math.ceil(math.log2(self.cfg.levels + 1)))


@UPLOAD_STAGES.register("sign")
class Sign(Compressor):
    name = "sign"

    def compress(self, x: torch.Tensor, ctx: UploadContext) -> torch.Tensor:
        return x.abs().mean(dim=1, keepdim=True) * x.sign()

    def bits_per_client(self, dim: int) -> float | None:
        return dim + 32.0
