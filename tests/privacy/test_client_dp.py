"""DP-FedAvg's arithmetic (fedrun/privacy/client.py): no update exceeds S after clipping and those within it are kept
as they are, the noise's empirical standard deviation is z S (z_Delta S under adaptive clipping), noise is keyed by
(seed, round), the fixed denominator, and Andrew et al.'s geometric clip update."""

from __future__ import annotations

import math

import pytest
import torch

from fedrun.config.schema import FLConfig
from fedrun.core.errors import ConfigError
from fedrun.privacy.client import (
    ClientDP,
    clip_rows,
    flat,
    geometric_clip,
    keyed_normal,
    unflat,
    update_noise_multiplier,
)
from fedrun.privacy.mechanisms.client import DPFedAvg, solved
from fedrun.privacy.settings import PrivacySettings
from fedrun.upload.base import UploadContext
from fedrun.upload.pipeline import Part, UploadPipeline


def _dp(**kw: object) -> ClientDP:
    fl = FLConfig(clients=100, participation=0.1)
    return solved(PrivacySettings(mode="client", **kw), fl, seed=3)  # type: ignore[arg-type]


def test_no_update_exceeds_the_clip_and_small_ones_are_kept() -> None:
    g = torch.Generator().manual_seed(0)
    delta = torch.randn(64, 500, generator=g) * torch.logspace(-3, 2, 64)[:, None]
    clipped, norms = clip_rows(delta, 1.5)
    after = torch.linalg.vector_norm(clipped, dim=1)
    assert (after <= 1.5 * (1 + 1e-6)).all()
    small = norms <= 1.5
    assert small.any() and (~small).any()
    assert torch.equal(clipped[small], delta[small])
    assert torch.allclose(after[~small], torch.full_like(after[~small], 1.5))
    # the direction is kept: a clipped row is a positive multiple of its update
    cos = torch.nn.functional.cosine_similarity(clipped, delta, dim=1)
    assert torch.allclose(cos, torch.ones_like(cos), atol=1e-5)
    zero, _ = clip_rows(torch.zeros(2, 5), 1.0)  # a zero update stays zero (no 0/0)
    assert torch.equal(zero, torch.zeros(2, 5))


def test_the_noise_std_is_z_times_s_and_keyed_by_seed_and_round() -> None:
    n = keyed_normal(200_000, 0.7 * 2.0, seed=5, purpose="dp-noise", rnd=4)
    assert n.dtype == torch.float64 and n.device.type == "cpu"
    assert float(n.std()) == pytest.approx(1.4, rel=0.01) and abs(float(n.mean())) < 0.01
    assert torch.equal(n, keyed_normal(200_000, 1.4, 5, "dp-noise", 4))
    assert not torch.equal(n, keyed_normal(200_000, 1.4, 5, "dp-noise", 5))
    assert not torch.equal(n, keyed_normal(200_000, 1.4, 6, "dp-noise", 4))


def test_the_released_update_is_the_clipped_sum_plus_noise_over_the_expected_cohort() -> None:
    dp = _dp(clip=0.5, noise_multiplier=0.8)
    assert dp.expected == pytest.approx(10.0)  # q N under Poisson sampling, whatever the cohort drawn
    w = {"a": torch.zeros(3, 4), "b": torch.zeros(7)}
    g = torch.Generator().manual_seed(1)
    stacked = {"a": torch.randn(6, 3, 4, generator=g), "b": torch.randn(6, 7, generator=g)}
    new, cols = dp.aggregate(w, stacked, rnd=2)
    clipped, _ = clip_rows(flat(stacked), 0.5)
    noise = keyed_normal(19, 0.8 * 0.5, 3, "dp-noise", 2).float()
    want = unflat(((clipped.sum(0) + noise) / 10.0)[None], {k: v[None] for k, v in w.items()})
    for k in w:
        assert torch.allclose(new[k], want[k][0], atol=1e-6)
    assert cols == {"clip": 0.5, "clipped_fraction": 1.0}  # every N(0,1) row of 19 numbers has norm > 0.5
    # through the upload pipeline as its stage: the uploads' uniform mean is that update, what a mean-update server
    # (FedAvg, FedOpt) then applies
    pipe = UploadPipeline([DPFedAvg(_dp(clip=0.5, noise_multiplier=0.8))])
    pipe.bind([Part("params", 19)])
    ctx = UploadContext(2, torch.arange(6), 3, torch.full((6,), 1 / 6, dtype=torch.float64), torch.device("cpu"))
    ups, _, diag = pipe.apply(w, {}, {"params": {k: v + w[k] for k, v in stacked.items()}}, None, ctx)
    for k in w:
        assert torch.allclose(ups["params"][k].mean(0), want[k][0], atol=1e-6)
    assert diag == cols


def test_empirical_std_of_the_released_noise_over_many_rounds() -> None:
    dp = _dp(clip=2.0, noise_multiplier=1.5)
    w = {"x": torch.zeros(5000)}
    draws = torch.stack([dp.aggregate(w, None, rnd=r)[0]["x"] for r in range(20)])
    # an empty cohort releases N(0, z^2 S^2) / m_exp: std z S / (q N)
    assert float(draws.std()) == pytest.approx(1.5 * 2.0 / 10.0, rel=0.02)


def test_fixed_size_sampling_divides_by_the_cohort_and_is_accounted_as_poisson_at_m_over_n() -> None:
    dp = _dp(sampling="fixed")
    assert dp.q == pytest.approx(0.1) and dp.expected == 10
    assert "fixed-size (accounted as Poisson with q = m/N)" in str(dp.describe()["sampling"])


def test_adaptive_clipping_follows_andrew_et_al() -> None:
    assert geometric_clip(1.0, 0.5, 0.5, 0.2) == 1.0
    assert geometric_clip(1.0, 1.0, 0.5, 0.2) == pytest.approx(math.exp(-0.1))  # all unclipped: S shrinks
    assert geometric_clip(1.0, 0.0, 0.5, 0.2) == pytest.approx(math.exp(0.1))  # all clipped: S grows
    # the update's noise pays for the count's release (Thm. 1): z_Delta = (z^-2 - (2 sigma_b)^-2)^(-1/2)
    assert update_noise_multiplier(1.0, 5.0) == pytest.approx((1 - 1 / 100) ** -0.5)
    assert update_noise_multiplier(1.0, None) == 1.0
    with pytest.raises(ConfigError, match=r"privacy.clip_count_stddev: .*valid: > 0.5"):
        update_noise_multiplier(1.0, 0.4)
    with pytest.raises(ConfigError, match="privacy.clip_count_stddev"):
        _dp(adaptive_clip=True, noise_multiplier=1.0)  # sigma_b = m_exp / 20 = 0.5 = z/2: refused when built
    assert _dp(adaptive_clip=True, noise_multiplier=0.5).count_stddev == pytest.approx(0.5)  # m_exp / 20
    dp = _dp(adaptive_clip=True, clip=1.0, noise_multiplier=1.0, clip_count_stddev=2.0)
    tiny = {"x": torch.full((4, 10), 1e-3)}  # every update far within S: the clip shrinks
    dp.aggregate({"x": torch.zeros(10)}, tiny, rnd=0)
    assert dp.clip < 1.0


def test_a_target_epsilon_sets_the_noise() -> None:
    dp = solved(
        PrivacySettings(mode="client", target_epsilon=4.0), FLConfig(clients=100, participation=0.1, rounds=40), 0
    )
    assert dp.epsilon(40) == pytest.approx(4.0, rel=1e-3) and dp.z != 1.0


def test_poisson_sampling_draws_each_client_independently_and_may_be_empty() -> None:
    import numpy as np

    from fedrun.engines.sampling import participations, sample_clients

    fl = FLConfig(clients=50, participation=0.2)
    sizes = [len(sample_clients(fl, 7, r, poisson=True)) for r in range(400)]
    assert abs(np.mean(sizes) - 10) < 0.5 and np.std(sizes) > 1  # q N on average, not a fixed m
    bern = FLConfig(clients=50, participation=0.2, sampling="bernoulli")
    for r in range(20):  # the same keyed draw as bernoulli's, without its non-empty fallback
        assert np.array_equal(sample_clients(fl, 7, r, poisson=True), sample_clients(bern, 7, r))
    tiny = FLConfig(clients=5, participation=0.2)
    assert min(len(sample_clients(tiny, 0, r, poisson=True)) for r in range(50)) == 0  # (1 - 0.2)^5 = 33% empty
    counts = participations(fl, 7, 30)  # fixed-size cohorts of 10 (sample-level DP's step count)
    assert counts.sum() == 30 * 10 and counts.max() > counts.min()
    assert np.array_equal(
        participations(fl, 7, 30, poisson=True),
        np.bincount(np.concatenate([sample_clients(fl, 7, r, poisson=True) for r in range(30)]), minlength=50),
    )
