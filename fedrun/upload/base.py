"""The upload-stage contract: one transform of the cohort's flat updates; and the registry of compressors.

Stages come from the run's capabilities (fedrun/capabilities/: a compressor of ``compression.name``, DP-FedAvg's
clip and noise of ``privacy.mode=client``), run in their :attr:`UploadStage.order`: compressors at 100, then
DP-FedAvg at 200, so that the sum the server releases has sensitivity S in what the clients actually send.

A stage sees the cohort's updates as one float32 matrix ``delta`` [m, d] (row i: client i's upload less what it
was sent, w_i - w^t, in cohort order) and returns the matrix the server receives. A ``stateful`` stage keeps one
float row of length d per client (error feedback's residual e_i), which the run stores with the client's other
persistent state, so it is checkpointed and resumes bit-exactly; clients not in the cohort keep theirs.

Randomness is keyed, never drawn from the global RNG: :meth:`UploadContext.generator` derives a generator from
(seed, stage, upload part, round, client) (fedrun/core/rng.py), so every engine, a resumed run and every member
of a sweep draw the same numbers for the same client.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from fedrun.core.registry import Registry
from fedrun.core.rng import torch_gen


@dataclass(frozen=True)
class UploadContext:
    """What a stage knows of the round: its index ``rnd`` (0-based), the cohort's ``clients`` (ids, in the rows'
    order), the run's ``seed``, the aggregation weights p_i (float64, summing to one), the ``device`` of the
    rows, and which upload ``part`` the rows are (``params``: the model update; else a method's extra upload,
    e.g. SCAFFOLD's ``delta_c``)."""

    rnd: int
    clients: torch.Tensor
    seed: int
    weights: torch.Tensor
    device: torch.device
    part: str = "params"

    def generator(self, purpose: str, client: int) -> torch.Generator:
        """A CPU generator keyed by (seed, purpose, part, round, client): the same draw on every engine and resume."""
        return torch_gen(self.seed, "upload", purpose, self.part, self.rnd, client)


class UploadStage(ABC):
    """One transform of the cohort's uploads (a compressor, a clipping or a noise stage).

    ``order`` places it in the pipeline (lower first): compressors at 100, DP-FedAvg's clip and noise at 200 (on
    what the compressor sends: a QSGD-quantised row can be longer than its input, and the released sum must have
    sensitivity S in what is sent). A capability hands its stages to the run (:meth:`Capability.upload_stages`).
    """

    name: str = ""
    stateful: bool = False
    order: ClassVar[int] = 100

    def check(self, dim: int, part: str) -> None:
        """Refuse (ConfigError naming the field) a setting that cannot apply to an upload part of ``dim`` floats."""
        return None

    def init_state(self, dim: int) -> torch.Tensor | None:
        """One client's initial state row (length ``dim``) when ``stateful``, else None."""
        return torch.zeros(dim, dtype=torch.float32) if self.stateful else None

    @abstractmethod
    def apply(
        self, delta: torch.Tensor, state: torch.Tensor | None, ctx: UploadContext
    ) -> tuple[torch.Tensor, torch.Tensor | None, dict[str, float]]:
        """(the rows the server receives [m, d], the clients' new state rows or None, diagnostics for metrics.csv)."""

    def replace_sum(self, rows: torch.Tensor, ctx: UploadContext) -> tuple[torch.Tensor, dict[str, float]] | None:
        """The server's own aggregate of the received rows [m, d] in place of their weighted sum (a robust aggregation
        rule), with its columns; None (the default): the weighted sum stands."""
        return None

    def apply_sum(self, total: torch.Tensor, ctx: UploadContext) -> tuple[torch.Tensor, dict[str, float]]:
        """A hook on the weighted sum sum_i p_i delta_i the server forms (central DP noise); unchanged by default."""
        return total, {}

    def bits_per_client(self, dim: int) -> float | None:
        """Bits one client sends for an upload part of ``dim`` floats after this stage; None: dense, unchanged."""
        return None


class RowStage(UploadStage):
    """A stage that replaces some rows of the cohort's matrix and leaves every other row as it is (a model attack on
    the malicious clients' uploads). The pipeline keeps its result as ``delta`` plus the replaced rows, so that only
    their uploads are rebuilt (:meth:`UploadPipeline.apply`) and no [m, d] copy is made, unless a later stage reads
    the whole matrix. Stateless."""

    @abstractmethod
    def replace_rows(
        self, delta: torch.Tensor, ctx: UploadContext
    ) -> tuple[tuple[torch.Tensor, torch.Tensor] | None, dict[str, float]]:
        """((the replaced rows' indices [a] on ``delta``'s device, their new values [a, d] in ``delta``'s dtype) or
        None when no row changes; diagnostics for metrics.csv)."""

    def apply(
        self, delta: torch.Tensor, state: torch.Tensor | None, ctx: UploadContext
    ) -> tuple[torch.Tensor, torch.Tensor | None, dict[str, float]]:
        """The whole matrix: ``delta`` with the rows of :meth:`replace_rows` replaced (``delta`` itself if none)."""
        patch, diag = self.replace_rows(delta, ctx)
        return (delta if patch is None else delta.index_copy(0, *patch)), None, diag


COMPRESSORS: Registry[Any] = Registry("compressor", "fedrun.upload.compressors")  # compressors/base.py's Compressor
