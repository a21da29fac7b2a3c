"""``privacy.mode=local``: local differential privacy with the Gaussian mechanism. Each client clips its update to
norm S = ``privacy.clip`` and adds N(0, z^2 S^2 I) to it itself before it uploads, so the server never sees an update
without noise; the server aggregates as the method does.

The unit is one client's update in a round: any two updates a client could send lie within 2S of each other, so each
release is a Gaussian mechanism of noise multiplier z / 2 (dp-accounting's ``GaussianDpEvent`` is in units of the
sensitivity), and a client's epsilon composes one such release per round it took part in (no amplification by
sampling: the client knows it was sampled). The run reports the epsilon of the clients that took part most.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from fedrun.data.cohorts import participations
from fedrun.privacy.accounting import epsilon
from fedrun.privacy.client import clip_rows
from fedrun.privacy.mechanisms.base import MECHANISMS, Mechanism
from fedrun.upload.base import UploadContext, UploadStage


class LocalNoise(UploadStage):
    """Clip each client's row to S and add its own keyed N(0, z^2 S^2 I), after any compressor."""

    name = "local_dp"
    order: ClassVar[int] = 200

    def __init__(self, mechanism: LocalDP) -> None:
        self.mechanism = mechanism

    def apply(
        self, delta: torch.Tensor, state: torch.Tensor | None, ctx: UploadContext
    ) -> tuple[torch.Tensor, torch.Tensor | None, dict[str, float]]:
        clip = self.mechanism.settings.clip
        clipped, norms = clip_rows(delta, clip)
        rows = [torch.randn(delta.shape[1], generator=ctx.generator("local-dp", int(c))) for c in ctx.clients]
        noise = torch.stack(rows).to(delta) * (self.mechanism.z * clip)
        return clipped + noise, None, {"clipped_fraction": float((norms > clip).float().mean())}


@MECHANISMS.register("local")
class LocalDP(Mechanism):
    """Local DP: every client noises its own clipped update; epsilon per client, of the most frequent participant."""

    title: ClassVar[str] = "local DP"
    unit: ClassVar[str] = "one client's update in each round it takes part in"

    def budget(self) -> tuple[float, int]:
        return 1.0, self.fl.rounds  # (a target is solved for a client that takes part in every round, at z / 2)

    def noise(self) -> tuple[float, int | None]:
        z, solved = super().noise()
        return (2 * z if solved is not None else z), solved  # the solve is in units of the sensitivity 2S

    def epsilon(self, rounds: int) -> float:
        most = int(participations(self.fl, self.seed, rounds).max())
        return epsilon(1.0, self.z / 2, most, self.settings.delta, self.settings.accountant)

    def upload_stages(self) -> list[Any]:
        return [LocalNoise(self)]

    def describe(self) -> dict[str, Any]:
        s = self.settings
        return {
            "mode": "local (Gaussian, each client)", "unit": self.unit, "noise_multiplier": self.z, "clip": s.clip,
            "sensitivity": "2 x clip", "delta": s.delta, "accountant": f"{s.accountant} (dp-accounting)",
            "target_epsilon": s.target_epsilon, "epsilon_is": "of the clients that took part most",
        }  # fmt: skip
