"""The defining properties of each robust aggregation rule (fedrun/robust/defences/), on small cohorts whose answer
is known: the median of identical uploads is that upload, the trimmed mean at trim 0 is the mean, Krum picks from
the honest cluster when the attackers are far, Bulyan keeps theta = n - 2f uploads, the geometric median's
weights rebuild it, centered clipping with a huge radius is the mean, norm bounding clips, FLTrust drops the
uploads that point away from its root update."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedrun.config.registry import build_params
from fedrun.core.errors import ConfigError
from fedrun.robust.base import DEFENCES, ServerView
from fedrun.robust.defences.bulyan import Bulyan, BulyanParams, bulyan_selection
from fedrun.robust.defences.centered_clipping import CenteredClipping, CenteredClippingParams
from fedrun.robust.defences.fltrust import FLTrust, FLTrustParams
from fedrun.robust.defences.geomed import GeoMed, GeoMedParams, geometric_median
from fedrun.robust.defences.krum import Krum, KrumParams, MultiKrum, MultiKrumParams, krum_scores
from fedrun.robust.defences.mean import Mean, MeanParams
from fedrun.robust.defences.median import Median, MedianParams, coordinate_median, sorted_coordinates
from fedrun.robust.defences.norm_bound import NormBound, NormBoundParams
from fedrun.robust.defences.trimmed_mean import TrimmedMean, TrimmedMeanParams, trimmed_mean
from fedrun.robust.distances import sq_dists


def cohort(honest: int, attackers: int, d: int = 30, far: float = 100.0, seed: int = 0) -> torch.Tensor:
    """``honest`` uploads near 0 then ``attackers`` far away (rows h.. are the attackers')."""
    g = torch.Generator().manual_seed(seed)
    return torch.cat([torch.randn(honest, d, generator=g), far + torch.randn(attackers, d, generator=g)])


def test_sq_dists_is_one_gram_product_equal_to_cdist_and_puts_non_finite_rows_at_infinity() -> None:
    x = cohort(8, 2, far=1e3).double()
    torch.testing.assert_close(sq_dists(x), torch.cdist(x, x).pow(2), rtol=1e-9, atol=1e-6)
    x[3, 5] = float("inf")
    d2 = sq_dists(x)
    assert torch.isinf(d2[3, torch.arange(10) != 3]).all() and d2[3, 3] == 0 and torch.isfinite(d2[0, 1])


def test_mean_is_the_weighted_mean() -> None:
    x = cohort(4, 0)
    p = torch.tensor([0.1, 0.2, 0.3, 0.4])
    out = Mean(MeanParams())(x, ServerView(weights=p))
    torch.testing.assert_close(out.value, (p[:, None] * x).sum(0))
    torch.testing.assert_close(out.weights, p)


def test_median_of_identical_uploads_is_that_upload_and_equals_numpys_median() -> None:
    row = torch.randn(17)
    assert torch.equal(Median(MedianParams())(row.expand(5, 17).clone(), ServerView()).value, row)
    for m in (5, 6):
        x = cohort(m, 0, d=9).double()
        np.testing.assert_allclose(coordinate_median(x).numpy(), np.median(x.numpy(), axis=0))


def test_median_ignores_a_minority_of_far_uploads() -> None:
    x = cohort(6, 5, far=1e9)
    assert coordinate_median(x).abs().max() < 5


def test_trimmed_mean_at_trim_zero_is_the_mean_and_trims_exactly_k_at_each_end() -> None:
    x = cohort(9, 0).double()
    torch.testing.assert_close(trimmed_mean(x, 0), x.mean(0))
    torch.testing.assert_close(TrimmedMean(TrimmedMeanParams(beta=0.0))(x, ServerView(f=0)).value, x.mean(0))
    s = x.sort(0).values
    torch.testing.assert_close(trimmed_mean(x, 2), s[2:7].mean(0))
    torch.testing.assert_close(TrimmedMean(TrimmedMeanParams(beta=0.25))(x, ServerView()).value, s[2:7].mean(0))


def test_trimmed_mean_loses_no_precision_to_a_huge_attacker() -> None:
    # a sum less the extremes would cancel the honest values away against 1e30
    x = torch.cat([torch.randn(7, 5), torch.full((2, 5), 1e30)])
    torch.testing.assert_close(trimmed_mean(x, 2), x.sort(0).values[2:7].mean(0))


def test_krum_picks_from_the_honest_cluster_when_the_attackers_are_far() -> None:
    for attackers in (1, 3):
        x = cohort(9, attackers)
        out = Krum(KrumParams())(x, ServerView(f=attackers))
        (i,) = out.selected.nonzero()[:, 0].tolist()
        assert i < 9 and torch.equal(out.value, x[i]) and out.weights[i] == 1 and out.weights.sum() == 1


def test_krum_score_sums_the_n_minus_f_minus_2_closest_squared_distances() -> None:
    x = cohort(6, 1).double()
    d2 = torch.cdist(x, x).pow(2)
    want = torch.stack([d2[i][torch.arange(7) != i].sort().values[: 7 - 1 - 2].sum() for i in range(7)])
    torch.testing.assert_close(krum_scores(sq_dists(x), 1), want)


def test_krum_ranks_an_infinite_upload_last() -> None:
    x = cohort(8, 0)
    x[0] = float("inf")
    out = Krum(KrumParams())(x, ServerView(f=1))
    assert not out.selected[0] and torch.isfinite(out.value).all()


def test_multi_krum_averages_the_honest_when_the_attackers_are_far() -> None:
    x = cohort(10, 3)
    out = MultiKrum(MultiKrumParams())(x, ServerView(f=3))  # m = n - f = 10: exactly the honest
    assert out.selected.tolist() == [True] * 10 + [False] * 3
    torch.testing.assert_close(out.value, x[:10].mean(0))
    p = torch.arange(1, 14, dtype=torch.float32) / 91
    weighted = MultiKrum(MultiKrumParams(m=4, weighted=True))(x, ServerView(f=3, weights=p))
    kept = weighted.selected.nonzero()[:, 0]
    assert len(kept) == 4 and kept.max() < 10
    torch.testing.assert_close(weighted.weights[kept], p[kept] / p[kept].sum())


def test_bulyan_selects_theta_uploads_and_aggregates_near_the_honest() -> None:
    f = 2
    x = cohort(9, f, far=50.0)  # n = 11 = 4f + 3
    out = Bulyan(BulyanParams())(x, ServerView(f=f))
    assert int(out.selected.sum()) == 11 - 2 * f
    assert (out.value - x[:9].mean(0)).abs().max() < 1.5
    chosen = bulyan_selection(sq_dists(x), f)
    assert len(set(chosen.tolist())) == len(chosen) == 7
    # Krum steps on at least 2f + 3 uploads pick honest ones; the last two (2f + 2 and 2f + 1 left) may not:
    # the beta = theta - 2f values closest to the median then leave the attackers' out
    assert (chosen[:5] < 9).all()


def test_bulyan_of_identical_uploads_is_that_upload() -> None:
    row = torch.randn(8)
    torch.testing.assert_close(Bulyan(BulyanParams())(row.expand(7, 8).clone(), ServerView(f=1)).value, row)


def test_geometric_median_weights_rebuild_it_and_resist_a_far_minority() -> None:
    x = cohort(7, 3, far=1e4).double()
    out = GeoMed(GeoMedParams(iterations=50, ftol=0.0))(x, ServerView())
    torch.testing.assert_close(out.weights @ x, out.value)
    assert out.value.norm() < 5 and float(out.weights[7:].sum()) < 1e-2
    # symmetric points: the median is their centre
    sym = torch.tensor([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0]], dtype=torch.float64) + 3.0
    z, _ = geometric_median(sym, torch.full((4,), 0.25, dtype=torch.float64), GeoMedParams())
    torch.testing.assert_close(z, torch.full((2,), 3.0, dtype=torch.float64))


def test_centered_clipping_with_a_huge_radius_is_the_mean_and_moves_at_most_tau() -> None:
    x = cohort(6, 2)
    big = CenteredClipping(CenteredClippingParams(tau=1e9))(x, ServerView(previous=torch.ones(30)))
    torch.testing.assert_close(big.value, x.mean(0))
    centre = torch.zeros(30)
    small = CenteredClipping(CenteredClippingParams(tau=0.5, clip_iterations=1))(x, ServerView(previous=centre))
    assert float((small.value - centre).norm()) <= 0.5 + 1e-6


def test_norm_bounding_clips_each_upload_and_adds_keyed_noise() -> None:
    x = cohort(5, 1, far=10.0)
    p = torch.full((6,), 1 / 6)
    out = NormBound(NormBoundParams(bound=2.0, sigma=0.0))(x, ServerView(weights=p))
    norms = x.norm(dim=1)
    torch.testing.assert_close(out.value, (p * (2.0 / norms).clamp(max=1.0)) @ x)
    assert float(out.weights[5]) < 1 / 6
    noisy = NormBound(NormBoundParams(bound=2.0, sigma=0.1))
    a = noisy(x, ServerView(weights=p, generator=torch.Generator().manual_seed(1))).value
    b = noisy(x, ServerView(weights=p, generator=torch.Generator().manual_seed(1))).value
    assert torch.equal(a, b) and 0.05 < float((a - out.value).std()) < 0.2
    with pytest.raises(ValueError, match="generator"):
        noisy(x, ServerView(weights=p))


def test_fltrust_drops_the_uploads_against_the_root_and_rescales_the_others() -> None:
    root = torch.tensor([1.0, 0.0, 0.0])
    x = torch.tensor([[2.0, 0.0, 0.0], [0.0, 3.0, 0.0], [-5.0, 0.0, 0.0], [10.0, 10.0, 0.0]])
    out = FLTrust(FLTrustParams())(x, ServerView(root=root))
    assert out.selected.tolist() == [True, False, False, True]
    c = 2**-0.5  # trust of [10, 10, 0]: cos 45 degrees
    want = (1.0 * torch.tensor([1.0, 0.0, 0.0]) + c * torch.tensor([c, c, 0.0])) / (1.0 + c)
    torch.testing.assert_close(out.value, want)
    torch.testing.assert_close(out.weights @ x, out.value)
    nothing = FLTrust(FLTrustParams())(-x[:1], ServerView(root=root))
    assert torch.equal(nothing.value, torch.zeros(3)) and not nothing.selected.any()


def test_every_rule_keeps_the_dtype_and_gives_float64_when_given_float64() -> None:
    x = cohort(9, 2).double()
    view = ServerView(f=2, root=x[:9].mean(0), generator=torch.Generator().manual_seed(0))
    for name in DEFENCES.names():
        entry = DEFENCES.get(name)
        out = entry.obj(entry.params())(x, view)
        assert out.value.dtype == torch.float64 and out.value.shape == (30,), name


def test_settings_are_checked_in_one_line_naming_the_field() -> None:
    with pytest.raises(ConfigError, match=r"defence\.beta: must be in \[0.0, 0.5\)"):
        build_params(TrimmedMeanParams, {"beta": 0.5}, "defence")
    with pytest.raises(ConfigError, match=r"defence\.tau: must be > 0"):
        build_params(CenteredClippingParams, {"tau": 0.0}, "defence")
    with pytest.raises(ConfigError, match=r"defence\.neighbours: invalid value 'n-f'"):
        build_params(KrumParams, {"neighbours": "n-f"}, "defence")
    assert build_params(MultiKrumParams, {"m": 5}, "defence").m == 5


def test_geometric_median_stops_early_with_the_rfa_codes_tolerance() -> None:
    x = cohort(7, 3, far=50.0).double()
    alpha = torch.full((10,), 0.1, dtype=torch.float64)
    long, _ = geometric_median(x, alpha, GeoMedParams(iterations=200, nu=1e-5))
    early, _ = geometric_median(x, alpha, GeoMedParams(iterations=200, nu=1e-5, ftol=1e-6))
    three, _ = geometric_median(x, alpha, GeoMedParams())  # the paper's R = 3
    assert float((early - long).norm()) < 1e-2 * float(long.norm() + 1) and not torch.equal(early, long)
    assert float((three - long).norm()) > float((early - long).norm())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_cpu_sort_keeps_the_median_and_trimmed_mean_of_torchs_sort_bit_for_bit(dtype: torch.dtype) -> None:
    # numpy's SIMD sort on the CPU (defences/median.py) orders the values as torch.sort does: every statistic read
    # off it is the one the torch-sorted implementation gave, bit for bit, infinities and huge values included
    for m in (7, 10, 100):
        g = torch.Generator().manual_seed(m)
        x = (0.01 * torch.randn(m, 3001, generator=g)).to(dtype)
        x[: m // 5] *= 1e30
        x[0, :5] = torch.tensor([float("inf"), -float("inf"), 0.0, -0.0, 1e-40])
        ref = x.T.contiguous().sort(dim=1).values
        assert torch.equal(sorted_coordinates(x), ref)
        for k in range(1, (m - 1) // 2 + 1, max(1, m // 10)):  # (k = 0 is the plain mean)
            assert torch.equal(trimmed_mean(x, k), ref[:, k : m - k].mean(dim=1))
        if m % 2:
            assert torch.equal(coordinate_median(x), x.kthvalue(m // 2 + 1, dim=0).values)
        else:
            assert torch.equal(coordinate_median(x), 0.5 * (ref[:, m // 2 - 1] + ref[:, m // 2]))
