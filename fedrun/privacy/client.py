"""Client-level differential privacy: DP-FedAvg (McMahan et al. 2018, "Learning differentially private recurrent
language models", Alg. 1) with quantile-based adaptive clipping (Andrew et al. 2021, "Differentially private
learning with adaptive clipping", Alg. 1).

Round t, cohort C_t (Poisson: each client w.p. q), client updates Delta_i = w_i - w^t:

    Delta = (sum_{i in C_t} Delta_i min(1, S / ||Delta_i||) + N(0, z^2 S^2 I)) / m_exp       (Alg. 1, "FlatClip")

with the fixed denominator m_exp = q N (Poisson: the analysis needs the sum's sensitivity S; McMahan et al. sec. 2),
or the cohort size m under fixed-size sampling. Adaptive clipping counts the unclipped updates, b_i = 1[||Delta_i||
<= S], privately: b_bar = (sum b_i + N(0, sigma_b^2)) / m_exp, then S <- S exp(-eta (b_bar - gamma)) (Andrew et al.
eq. 3, the geometric update); the count's release is paid for by raising the update noise to
z_Delta = (z^-2 - (2 sigma_b)^-2)^(-1/2) (Andrew et al. Thm. 1), so the pair costs what one Gaussian of z does.

Every noise draw is keyed by (seed, purpose, round) and drawn on CPU in float64, then cast: every engine, and a
resumed run, adds the same noise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from fedrun.config.schema import FLConfig
from fedrun.core.errors import ConfigError
from fedrun.core.rng import torch_gen
from fedrun.core.tree import Tensors
from fedrun.privacy.accounting import epsilon
from fedrun.privacy.settings import PrivacySettings


def flat(stacked: Tensors) -> torch.Tensor:
    """A stacked tree [m, ...] as one [m, d] matrix (keys in sorted order)."""
    m = next(iter(stacked.values())).shape[0]
    return torch.cat([stacked[k].reshape(m, -1) for k in sorted(stacked)], dim=1)


def unflat(rows: torch.Tensor, like: Tensors) -> Tensors:
    """:func:`flat`'s inverse: [m, d] back into the stacked tree shaped as ``like`` (its leaves [m, ...])."""
    out, at = {}, 0
    for k in sorted(like):
        size = like[k][0].numel()
        out[k] = rows[:, at : at + size].reshape(like[k].shape)
        at += size
    return out


def clip_rows(delta: torch.Tensor, clip: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(each row of ``delta`` [m, d] scaled to norm <= ``clip``: Delta_i min(1, S/||Delta_i||), the rows' norms)."""
    norms = torch.linalg.vector_norm(delta, dim=1)
    factor = clip / torch.clamp(norms, min=clip)  # min(1, S/||.||), without a division by a zero norm
    return delta * factor[:, None], norms


def keyed_normal(size: int, std: float, seed: int, purpose: str, rnd: int) -> torch.Tensor:
    """N(0, std^2 I_size) drawn from the generator of (seed, purpose, rnd), on CPU in float64."""
    return torch.randn(size, generator=torch_gen(seed, purpose, rnd), dtype=torch.float64) * std


def update_noise_multiplier(z: float, count_stddev: float | None) -> float:
    """z_Delta, the update's noise multiplier when the unclipped count is released with std ``count_stddev``
    (Andrew et al. 2021 Thm. 1): (z^-2 - (2 sigma_b)^-2)^(-1/2); z itself without adaptive clipping."""
    if count_stddev is None or z == 0:
        return z
    inner = z**-2 - (2 * count_stddev) ** -2
    if inner <= 0:
        raise ConfigError(
            "privacy.clip_count_stddev",
            f"{count_stddev:g} leaves no budget for the update at z={z:g} (Andrew et al. Thm. 1 needs sigma_b > z/2);"
            f" valid: > {z / 2:g}",
        )
    return float(inner**-0.5)


def geometric_clip(clip: float, unclipped_mean: float, quantile: float, lr: float) -> float:
    """Andrew et al. 2021 eq. 3: S exp(-eta (b_bar - gamma))."""
    return clip * math.exp(-lr * (unclipped_mean - quantile))


@dataclass
class ClientDP:
    """DP-FedAvg's server side for one run: the sampling rate, the noise multiplier z (the run's: fedrun/privacy/
    mechanisms/base.py), the expected cohort and the current clip S (adaptive: state, saved in the checkpoint)."""

    config: PrivacySettings
    fl: FLConfig
    seed: int
    z: float
    clip: float
    _unclipped: float = field(default=0.0, init=False, repr=False)  # this round's unclipped count (clip_cohort)

    def __post_init__(self) -> None:
        self.update_z  # noqa: B018 - refuse a count noise that leaves nothing for the update now, not in round 1

    @staticmethod
    def rate(config: PrivacySettings, fl: FLConfig) -> float:
        """q: fl.participation under Poisson sampling; m/N for fixed-size sampling (accounted as if Poisson)."""
        return fl.participation if config.sampling == "poisson" else fl.cohort_size / fl.clients

    @property
    def q(self) -> float:
        return self.rate(self.config, self.fl)

    @property
    def expected(self) -> float:
        """m_exp, the fixed denominator: q N (Poisson) or the cohort size m (fixed)."""
        return self.q * self.fl.clients if self.config.sampling == "poisson" else float(self.fl.cohort_size)

    @property
    def count_stddev(self) -> float | None:
        """sigma_b (adaptive clipping only): the configured one, or m_exp / 20 (Andrew et al. sec. 4)."""
        if not self.config.adaptive_clip:
            return None
        return self.config.clip_count_stddev or self.expected / 20

    @property
    def update_z(self) -> float:
        return update_noise_multiplier(self.z, self.count_stddev)

    def describe(self) -> dict[str, object]:
        """summary.json's ``privacy`` entry: what epsilon covers and how it was computed (docs/privacy.md)."""
        c = self.config
        sampling = "poisson" if c.sampling == "poisson" else "fixed-size (accounted as Poisson with q = m/N)"
        return {
            "mode": "client (DP-FedAvg)", "unit": "one client's whole data", "sampling": sampling, "q": self.q,
            "noise_multiplier": self.z, "update_noise_multiplier": self.update_z, "clip": c.clip,
            "adaptive_clip": c.adaptive_clip, "delta": c.delta, "accountant": f"{c.accountant} (dp-accounting)",
            "denominator": self.expected, "target_epsilon": c.target_epsilon,
        }  # fmt: skip

    def epsilon(self, rounds: int) -> float:
        """The budget spent after ``rounds`` rounds, at privacy.delta (dp-accounting)."""
        return epsilon(self.q, self.z, rounds, self.config.delta, self.config.accountant)

    def clip_cohort(self, delta: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        """The cohort's updates [m, d] clipped to the current S, and the round's columns (S used, the share of
        clients clipped); the unclipped count is kept for :meth:`release`'s adaptive step."""
        clipped, norms = clip_rows(delta, self.clip)
        self._unclipped = float((norms <= self.clip).sum())
        return clipped, {"clip": self.clip, "clipped_fraction": 1 - self._unclipped / len(delta)}

    def release(self, total: torch.Tensor, rnd: int) -> torch.Tensor:
        """(sum_i clip(Delta_i) + N(0, z_Delta^2 S^2 I)) / m_exp, from the sum of the clipped updates ``total``
        [d] (zero for an empty cohort); with adaptive clipping, S then takes its geometric step on the noised
        unclipped count of :meth:`clip_cohort` (0 for an empty cohort)."""
        clip, unclipped = self.clip, self._unclipped
        self._unclipped = 0.0
        noise = keyed_normal(total.numel(), self.update_z * clip, self.seed, "dp-noise", rnd)
        out = (total + noise.to(total.dtype).to(total.device).reshape(total.shape)) / self.expected
        if self.config.adaptive_clip:
            sigma_b = self.count_stddev or 0.0
            b_bar = (unclipped + float(keyed_normal(1, sigma_b, self.seed, "dp-count", rnd)[0])) / self.expected
            self.clip = geometric_clip(clip, b_bar, self.config.target_quantile, self.config.clip_lr)
        return out

    def aggregate(self, params: Tensors, stacked: Tensors | None, rnd: int) -> tuple[Tensors, dict[str, float]]:
        """Round ``rnd``'s DP-FedAvg step from w^t = ``params`` and the cohort's stacked models (None: an empty
        Poisson cohort, whose release is the noise alone): (w^{t+1}, the round's clip columns); adapts S.
        (A run with a cohort takes the same two steps in the upload pipeline: fedrun/privacy/mechanisms/client.py.)"""
        like = {k: v[None] for k, v in params.items()}
        w = flat(like)[0]
        columns = {"clip": self.clip, "clipped_fraction": 0.0}
        total = torch.zeros_like(w)
        if stacked is not None:
            clipped, columns = self.clip_cohort(flat(stacked) - w)
            total = clipped.sum(0)
        new = unflat((w + self.release(total, rnd))[None], like)
        return {k: v[0] for k, v in new.items()}, columns
