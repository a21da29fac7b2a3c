"""The compressor contract: a compressor C with optional client-side error feedback, applied to each client's row x
of the cohort's [m, d] updates; one module of this package each, registered in
:data:`~fedrun.upload.base.COMPRESSORS` (``compression.name``):

topk, randk (Stich et al. 2018), qsgd (Alistarh et al. 2017), sign (EF-signSGD); each module says its C and the
bits a client sends.

Error feedback (Karimireddy et al. 2019, Algorithm 2; Stich et al. 2018, eq. (6)): the client compresses
p_i = delta_i + e_i, sends C(p_i) and keeps e_i <- p_i - C(p_i), so what one round drops is sent later. e_i is
persistent client state (one float32 row per client and upload part), checkpointed with the others.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from typing import TYPE_CHECKING

import torch

from fedrun.core.errors import ConfigError
from fedrun.upload.base import UploadContext, UploadStage

if TYPE_CHECKING:
    from fedrun.upload.settings import CompressionSettings


class Compressor(UploadStage):
    """A compressor C with optional error feedback; subclasses define :meth:`compress` and the bits it sends."""

    def __init__(self, cfg: CompressionSettings) -> None:
        self.cfg = cfg
        self.stateful = cfg.error_feedback

    @abstractmethod
    def compress(self, x: torch.Tensor, ctx: UploadContext) -> torch.Tensor:
        """C applied to every row of ``x`` [m, d]."""

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
