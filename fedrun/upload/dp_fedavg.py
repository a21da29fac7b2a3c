"""Client-level differential privacy as upload stages: DP-FedAvg (McMahan et al. 2018 Alg. 1; the arithmetic is
fedrun/privacy/client.py's :class:`~fedrun.privacy.client.ClientDP`, docs/privacy.md).

:meth:`DPFedAvg.apply` clips each client's row to S (the last per-client stage, ``order`` 200, after any
compressor: the server's sum must have sensitivity S in what the clients actually send, and a QSGD-quantised row
can be longer than its input); :meth:`DPFedAvg.apply_sum` turns the pipeline's uniform mean (1/m) sum_i clip_i
into (sum_i clip_i + N(0, z^2 S^2 I)) / m_exp, the fixed denominator the analysis needs (the round's weights are
uniform under privacy.mode=client: fedrun/run/rounds.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import torch

from fedrun.privacy.client import ClientDP
from fedrun.upload.base import UPLOAD_STAGES, UploadContext, UploadStage

if TYPE_CHECKING:
    from fedrun.config.schema import RunSpec


@UPLOAD_STAGES.register("dp_fedavg")
class DPFedAvg(UploadStage):
    """Clip per client, Gaussian noise on the sum, the fixed denominator; S adapts (Andrew et al. 2021) if asked."""

    name = "dp_fedavg"
    order: ClassVar[int] = 200

    def __init__(self, dp: ClientDP) -> None:
        self.dp = dp

    @classmethod
    def from_spec(cls, spec: RunSpec) -> UploadStage | None:
        """privacy.mode=client: the stage, its z solved for privacy.target_epsilon (a ConfigError when unreachable)."""
        if spec.privacy.mode != "client":
            return None
        return cls(ClientDP.build(spec.privacy, spec.fl, spec.seed))

    def apply(
        self, delta: torch.Tensor, state: torch.Tensor | None, ctx: UploadContext
    ) -> tuple[torch.Tensor, torch.Tensor | None, dict[str, float]]:
        clipped, columns = self.dp.clip_cohort(delta)
        return clipped, None, columns

    def apply_sum(self, total: torch.Tensor, ctx: UploadContext) -> tuple[torch.Tensor, dict[str, float]]:
        return self.dp.release(total * len(ctx.clients), ctx.rnd), {}


def client_dp(pipeline_stages: list[UploadStage]) -> ClientDP | None:
    """The run's DP-FedAvg (its state, S, is checkpointed by the run), or None without client-level DP."""
    return next((s.dp for s in pipeline_stages if isinstance(s, DPFedAvg)), None)
