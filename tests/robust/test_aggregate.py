"""The robust-aggregation contract (fedrun/robust/base.py) and the pre-aggregators (fedrun/robust/preagg/): the
registries, which cohorts a rule refuses (Krum n > 2f + 2, Bulyan n >= 4f + 3, the trimmed mean's trim), and
pre-aggregation in front of a defence, its weights mapped back to the uploads."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from fedrun.core.errors import ConfigError
from fedrun.robust.base import (
    ATTACKS,
    DEFENCES,
    PREAGGREGATORS,
    ServerView,
    check_cohort,
    refusal,
    robust_aggregate,
    round_generator,
)
from fedrun.robust.defences.bulyan import Bulyan, BulyanParams
from fedrun.robust.defences.krum import Krum, KrumParams, MultiKrum, MultiKrumParams
from fedrun.robust.defences.mean import Mean, MeanParams
from fedrun.robust.defences.median import Median, MedianParams
from fedrun.robust.defences.trimmed_mean import TrimmedMean, TrimmedMeanParams
from fedrun.robust.preagg.bucketing import Bucketing, BucketingParams
from fedrun.robust.preagg.nnm import NNM, NNMParams


def cohort(honest: int, attackers: int, d: int = 20, far: float = 100.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    return torch.cat([torch.randn(honest, d, generator=g), far + torch.randn(attackers, d, generator=g)])


def test_every_component_is_registered_with_a_settings_dataclass() -> None:
    assert DEFENCES.names() == [
        "bulyan", "centered_clipping", "fltrust", "geomed", "krum", "mean", "median", "multi_krum", "norm_bound",
        "trimmed_mean",
    ]  # fmt: skip
    assert PREAGGREGATORS.names() == ["bucketing", "nnm"]
    assert ATTACKS.names() == [
        "alie", "backdoor", "fang_krum", "fang_trmean", "gaussian", "ipm", "label_flip", "min_max", "min_sum",
        "scaling", "sign_flip",
    ]  # fmt: skip
    for reg in (DEFENCES, PREAGGREGATORS, ATTACKS):
        for name in reg.names():
            entry = reg.get(name)
            assert dataclasses.is_dataclass(entry.params) and entry.obj.name == name
            entry.obj(entry.params())  # every default is valid
    with pytest.raises(ConfigError, match=r"defence.name: unknown defence 'krun'; valid: bulyan, "):
        DEFENCES.get("krun")


def test_krum_needs_more_than_2f_plus_2_and_bulyan_at_least_4f_plus_3() -> None:
    krum, bulyan = Krum(KrumParams()), Bulyan(BulyanParams())
    assert refusal(krum, (), 8, 3) == "krum needs at least 9 uploads to tolerate 3 Byzantine, got 8"
    assert refusal(krum, (), 9, 3) is None
    assert refusal(bulyan, (), 14, 3) == "bulyan needs at least 15 uploads to tolerate 3 Byzantine, got 14"
    assert refusal(bulyan, (), 15, 3) is None
    assert refusal(Median(MedianParams()), (), 6, 3) is not None and refusal(Mean(MeanParams()), (), 1, 0) is None
    assert refusal(krum, (), 4, 5) == "5 Byzantine uploads among 4 is not a count; valid: 0..4"
    with pytest.raises(ConfigError, match=r"^defence: krum needs at least 9 uploads .*, got 8$"):
        check_cohort(krum, (), 8, 3)


def test_multi_krum_refuses_to_average_more_than_the_honest() -> None:
    rule = MultiKrum(MultiKrumParams(m=8))
    assert refusal(rule, (), 10, 3) == "multi_krum averages m=8 uploads, more than the n - f = 7 honest ones, got 10"
    assert refusal(rule, (), 11, 3) is None


def test_the_trimmed_mean_refuses_a_trim_below_f_or_at_half() -> None:
    assert refusal(TrimmedMean(TrimmedMeanParams()), (), 7, 3) is None
    assert refusal(TrimmedMean(TrimmedMeanParams()), (), 6, 3) is not None
    beta = TrimmedMean(TrimmedMeanParams(beta=0.2))
    assert refusal(beta, (), 10, 2) is None  # trims floor(0.2 * 10) = 2
    assert "trims 1 at each end (beta=0.2), fewer than the 2 Byzantine" in str(refusal(beta, (), 9, 2))


def test_bucketing_shrinks_the_cohort_a_rule_after_it_must_handle() -> None:
    krum, bucket = Krum(KrumParams()), Bucketing(BucketingParams(s=2))
    assert bucket.after(20, 3) == (10, 3) and bucket.after(5, 4) == (3, 3)
    assert refusal(krum, (bucket,), 20, 3) is None  # 10 buckets > 2 * 3 + 2
    why = "krum needs at least 9 uploads to tolerate 3 Byzantine, got 15 (8 after bucketing)"
    assert refusal(krum, (bucket,), 15, 3) == why


def test_bucketing_with_s_1_is_the_identity() -> None:
    x = cohort(7, 2)
    out = Bucketing(BucketingParams(s=1))(x, ServerView(f=2))
    assert torch.equal(out.y, x) and torch.equal(out.mix, torch.eye(9)) and out.view.f == 2
    krum = Krum(KrumParams())
    plain = krum(x, ServerView(f=2))
    bucketed = robust_aggregate(x, krum, ServerView(f=2), (Bucketing(BucketingParams(s=1)),))
    assert torch.equal(plain.value, bucketed.value) and torch.equal(plain.weights, bucketed.weights)


def test_bucketing_averages_buckets_of_a_keyed_shuffle() -> None:
    x = cohort(7, 0).double()
    view = ServerView(f=1, weights=torch.full((7,), 1 / 7, dtype=torch.float64))
    a = Bucketing(BucketingParams(s=3))(x, dataclasses.replace(view, generator=torch.Generator().manual_seed(5)))
    b = Bucketing(BucketingParams(s=3))(x, dataclasses.replace(view, generator=torch.Generator().manual_seed(5)))
    assert torch.equal(a.y, b.y) and a.y.shape == (3, 20)
    torch.testing.assert_close(a.mix @ x, a.y)
    assert a.mix.ne(0).sum(1).tolist() == [3, 3, 1] and torch.allclose(a.mix.sum(1), torch.ones(3, dtype=torch.float64))
    torch.testing.assert_close(a.view.weights, torch.tensor([3 / 7, 3 / 7, 1 / 7], dtype=torch.float64))
    with pytest.raises(ValueError, match="generator"):
        Bucketing(BucketingParams(s=3))(x, view)


def test_nnm_mixes_each_upload_with_its_n_minus_f_nearest() -> None:
    x = cohort(6, 2)
    out = NNM(NNMParams())(x, ServerView(f=2))
    assert out.mix.shape == (8, 8) and (out.mix.ne(0).sum(1) == 6).all() and (out.mix.diagonal() > 0).all()
    assert not out.mix[:6, 6:].any()  # an honest upload's 6 nearest are the 6 honest
    torch.testing.assert_close(out.y[:6], x[:6].mean(0).expand(6, 20))


def test_weights_after_a_pre_aggregator_come_back_per_upload() -> None:
    x = cohort(9, 2)
    view = ServerView(f=2, generator=torch.Generator().manual_seed(0))
    out = robust_aggregate(x, MultiKrum(MultiKrumParams()), view, (NNM(NNMParams()),))
    torch.testing.assert_close(out.weights @ x, out.value)
    torch.testing.assert_close(out.weights.sum(), torch.tensor(1.0))
    bucketed = robust_aggregate(x, Krum(KrumParams()), view, (Bucketing(BucketingParams(s=2)),))
    assert int(bucketed.selected.sum()) in (1, 2) and torch.allclose(bucketed.weights @ x, bucketed.value)


def test_round_generators_are_keyed_by_seed_purpose_and_round() -> None:
    draw = lambda *key: torch.randn(3, generator=round_generator(*key))  # noqa: E731
    assert torch.equal(draw(0, "defence", 4), draw(0, "defence", 4))
    assert not torch.equal(draw(0, "defence", 4), draw(0, "defence", 5))
    assert not torch.equal(draw(0, "defence", 4), draw(0, "attack", 4))
    assert not torch.equal(draw(0, "defence", 4), draw(1, "defence", 4))
