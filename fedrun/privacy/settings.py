"""The ``privacy`` section (fedrun/privacy/, docs/privacy.md): the mechanism (``privacy.mode``, a registered name of
fedrun/privacy/mechanisms/ or ``none``), its clip and noise, and the accountant that turns them into epsilon."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from fedrun.config.registry import in_range, positive
from fedrun.core.errors import ConfigError
from fedrun.privacy.registries import MECHANISMS

NONE = "none"  # privacy.mode without a mechanism


@dataclass(frozen=True)
class PrivacySettings:
    """Differential privacy (``privacy.*``). ``mode``: none; client (DP-FedAvg, McMahan et al. 2018: each client's
    update clipped to norm ``clip``, N(0, z^2 clip^2) added to the sum, epsilon per client's participation);
    sample (DP-SGD inside each client, Abadi et al. 2016: per-sample gradients clipped to ``clip``, N(0, z^2 clip^2)
    added to their sum, epsilon per sample of a client's data). The budget comes from dp-accounting at ``delta``;
    ``target_epsilon`` solves z over the whole run instead of ``noise_multiplier``.
    """

    mode: str = "none"  # none | client (DP-FedAvg) | sample (DP-SGD in each client)
    clip: float = 1.0  # S (client: update norm; sample: per-sample gradient norm C); adaptive: its starting value
    noise_multiplier: float = 1.0  # z: the noise's std is z x clip (ignored when target_epsilon is set)
    target_epsilon: float | None = None  # solve z (dp-accounting) so the whole run spends this epsilon at delta
    delta: float = 1e-5  # the delta epsilon is reported at (1e-5: McMahan et al. 2018 use ~1/N^1.1; Opacus' examples)
    # rdp (Renyi DP, Mironov 2017) | pld (privacy loss distributions: tighter, slower)
    accountant: Literal["rdp", "pld"] = "rdp"
    # client: poisson (each client independently w.p. fl.participation, what the accountant assumes) | fixed
    # (fl.participation x N clients without replacement: accounted as Poisson with q = m/N, labelled as such)
    sampling: Literal["poisson", "fixed"] = "poisson"
    adaptive_clip: bool = False  # client: quantile-based adaptive clipping (Andrew et al. 2021, Alg. 1)
    target_quantile: float = 0.5  # gamma: the share of updates left unclipped the clip tracks (Andrew et al.: 0.5)
    clip_lr: float = 0.2  # eta: S <- S exp(-eta (b_bar - gamma)) (Andrew et al. 2021: 0.2)
    clip_count_stddev: float | None = None  # sigma_b of the unclipped count's noise; None: m_expected / 20 (Andrew)

    def __post_init__(self) -> None:
        modes = (NONE, *MECHANISMS.names())
        if self.mode not in modes:
            raise ConfigError("mode", f"invalid value {self.mode!r}; valid: {', '.join(modes)}")
        positive("clip", self.clip)
        if not (isinstance(self.noise_multiplier, int | float) and 0 <= self.noise_multiplier < math.inf):
            raise ConfigError(
                "noise_multiplier", f"must be a finite number >= 0 (0: no noise), got {self.noise_multiplier}"
            )
        positive("target_epsilon", self.target_epsilon)
        in_range("delta", self.delta, 0.0, 1.0, lo_open=True, hi_open=True)
        in_range("target_quantile", self.target_quantile, 0.0, 1.0)
        positive("clip_lr", self.clip_lr, allow_zero=True)
        positive("clip_count_stddev", self.clip_count_stddev)

    @property
    def on(self) -> bool:
        """Whether a mechanism is chosen (``mode`` other than none)."""
        return self.mode != NONE

    @classmethod
    def of(cls, spec: Any) -> PrivacySettings:
        """The run's ``privacy`` section (a :class:`~fedrun.config.schema.RunSpec`'s)."""
        out: PrivacySettings = spec.sections["privacy"]
        return out
