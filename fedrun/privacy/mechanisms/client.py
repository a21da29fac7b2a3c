"""``privacy.mode=client``: DP-FedAvg (McMahan et al. 2018, Alg. 1), with adaptive clipping (Andrew et al. 2021);
the arithmetic is fedrun/privacy/client.py's :class:`~fedrun.privacy.client.ClientDP`, docs/privacy.md.

Its noise enters as an upload stage: :meth:`DPFedAvg.apply` clips each client's row to S (the last per-client
stage, ``order`` 200, after any compressor: the server's sum must have sensitivity S in what the clients actually
send, and a QSGD-quantised row can be longer than its input); :meth:`DPFedAvg.apply_sum` turns the pipeline's
uniform mean (1/m) sum_i clip_i into (sum_i clip_i + N(0, z^2 S^2 I)) / m_exp, the fixed denominator the analysis
needs (the round's weights are uniform: :meth:`ClientLevel.weighting`). Under Poisson sampling it draws the cohort
itself, and a round whose cohort is empty releases the noise alone. Epsilon is per client's participation:
one Poisson-subsampled Gaussian (q, z) per round.
"""

from __future__ import annotations

import functools
import time
from typing import Any, ClassVar

import torch

from fedrun.core.errors import ConfigError
from fedrun.core.tree import Tree
from fedrun.privacy.accounting import MIN_NOISE, check_reachable, epsilon, noise_for_epsilon
from fedrun.privacy.client import ClientDP
from fedrun.privacy.mechanisms.base import MECHANISMS, Mechanism
from fedrun.privacy.settings import PrivacySettings
from fedrun.upload.base import UploadContext, UploadStage


class DPFedAvg(UploadStage):
    """Clip per client, Gaussian noise on the sum, the fixed denominator; S adapts (Andrew et al. 2021) if asked."""

    name = "dp_fedavg"
    order: ClassVar[int] = 200

    def __init__(self, dp: ClientDP | ClientLevel) -> None:
        self.source = dp

    @property
    def dp(self) -> ClientDP:
        """The server side it runs: a mechanism's is built when first used, once its z is known."""
        return self.source if isinstance(self.source, ClientDP) else self.source.dp

    def apply(
        self, delta: torch.Tensor, state: torch.Tensor | None, ctx: UploadContext
    ) -> tuple[torch.Tensor, torch.Tensor | None, dict[str, float]]:
        clipped, columns = self.dp.clip_cohort(delta)
        return clipped, None, columns

    def apply_sum(self, total: torch.Tensor, ctx: UploadContext) -> tuple[torch.Tensor, dict[str, float]]:
        return self.dp.release(total * len(ctx.clients), ctx.rnd), {}


def solved(settings: PrivacySettings, fl: Any, seed: int) -> ClientDP:
    """DP-FedAvg's server side as a run starts it: z solved with dp-accounting for ``target_epsilon`` over
    ``fl.rounds`` (a ConfigError when none reaches it; cached), else the configured one; a count noise that leaves
    nothing for the update refused (a ConfigError)."""
    z = settings.noise_multiplier
    if settings.target_epsilon is not None:
        q = ClientDP.rate(settings, fl)
        z = noise_for_epsilon(q, fl.rounds, settings.delta, settings.target_epsilon, settings.accountant)
    return ClientDP(settings, fl, seed, z, settings.clip)


def count_noise_refused(settings: PrivacySettings, fl: Any) -> bool:
    """Whether the z that :func:`solved` finds for ``target_epsilon`` is sure to leave nothing for the update under
    adaptive clipping (Andrew et al. 2021 Thm. 1 needs z < 2 sigma_b), known without the search: the budget at
    z = 2 sigma_b already exceeds the target (epsilon falls as z grows), or 2 sigma_b is below the smallest z tried."""
    sigma_b = ClientDP(settings, fl, 0, 0.0, settings.clip).count_stddev  # (z = 0: sigma_b needs no z)
    if settings.target_epsilon is None or sigma_b is None:
        return False
    if 2 * sigma_b <= MIN_NOISE:
        return True
    q = ClientDP.rate(settings, fl)
    return epsilon(q, 2 * sigma_b, fl.rounds, settings.delta, settings.accountant) > settings.target_epsilon


@MECHANISMS.register("client")
class ClientLevel(Mechanism):
    """DP-FedAvg: the unit is one client's whole data; its clip S is state (adaptive clipping changes it)."""

    title: ClassVar[str] = "DP-FedAvg"
    unit: ClassVar[str] = "one client's whole data"

    @functools.cached_property
    def dp(self) -> ClientDP:
        """The server side, built when first used: at the checkpoint's z on a resume (no solve), else at the one
        solved for the target (its count noise checked against the z the rounds use)."""
        return ClientDP(self.settings, self.fl, self.seed, self.z, self.settings.clip)

    @classmethod
    def check(cls, settings: PrivacySettings, spec: Any) -> None:
        """The method must upload its model alone and step the server from the mean update, which the clipped noisy
        sum replaces: it declares so itself (:attr:`Algorithm.steps_from_mean`)."""
        algo = spec.algorithm.obj
        if not algo.declares("steps_from_mean"):
            from fedrun.config.registry import ALGORITHMS

            ok = [n for n in ALGORITHMS.names() if ALGORITHMS.get(n).obj.declares("steps_from_mean")]
            raise ConfigError(
                "algorithm.name",
                f"{spec.algorithm.name} uploads more than its model or aggregates otherwise than by the mean update,"
                f" which DP-FedAvg's clipped noisy sum replaces; valid with privacy.mode=client: {', '.join(ok)}",
            )

    @classmethod
    def preflight(cls, settings: PrivacySettings, spec: Any) -> None:
        """A target no noise reaches, and a count noise that leaves nothing for the update, refused before any data
        is read, without solving z for a run that passes: a resumed or extended run keeps its checkpoint's z, and a
        new one solves it when built. (A count noise within the search's tolerance of z / 2 is refused then.)"""
        if settings.target_epsilon is None or count_noise_refused(settings, spec.fl):
            solved(settings, spec.fl, spec.seed)  # (a refusal's message names the z)
            return
        q = ClientDP.rate(settings, spec.fl)
        check_reachable(q, spec.fl.rounds, settings.delta, settings.target_epsilon, settings.accountant)

    def budget(self) -> tuple[float, int]:
        return ClientDP.rate(self.settings, self.fl), self.fl.rounds

    def epsilon(self, rounds: int) -> float:
        return self.dp.epsilon(rounds)

    def sampling(self) -> bool:
        return self.settings.sampling == "poisson"

    def upload_stages(self) -> list[Any]:
        return [DPFedAvg(self)]  # (its server side not built here: a resume's z is not loaded yet)

    def weighting(self) -> str | None:
        return "uniform"  # a client's weight bounds its sensitivity (docs/privacy.md)

    def empty_round(self, state: Any, rnd: int) -> dict[str, float] | None:
        """w^{t+1} = w^t + N(0, z^2 S^2) / m_exp (McMahan et al. 2018 Alg. 1 with an empty sum); the method's server
        state and the model's buffers stay. Returns the round's columns."""
        t = time.perf_counter()
        state.params, columns = self.dp.aggregate(state.params, None, rnd)
        state.agg_time += time.perf_counter() - t
        return columns

    def describe(self) -> dict[str, Any]:
        return dict(self.dp.describe())

    def state_dict(self) -> Tree:
        clip = self.dp.clip if "dp" in self.__dict__ else self.settings.clip  # (not built yet: S is the first)
        return {**super().state_dict(), "clip": torch.tensor(clip, dtype=torch.float64)}

    def load_state_dict(self, tree: Tree) -> None:
        super().load_state_dict(tree)
        self.dp.z, self.dp.clip = self.z, float(tree["clip"])
