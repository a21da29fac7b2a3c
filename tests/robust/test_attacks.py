"""The attacks (fedrun/robust/attacks/) do what their papers say: a scaled replacement lands the attacker's model
under plain mean aggregation, ALIE's z comes from n and the attackers, IPM turns the inner product negative,
min-max and min-sum meet their constraint with equality, Fang et al.'s attacks get their crafted update chosen
by Krum and push the trimmed mean against the honest direction; label flipping and the backdoor change only the
attackers' samples; the malicious set is a seeded draw."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fedrun.config.registry import build_params
from fedrun.core.errors import ConfigError
from fedrun.robust.attacks.alie import ALIE, ALIEParams, z_max
from fedrun.robust.attacks.backdoor import Backdoor, BackdoorParams, apply_trigger, attack_success, trigger_mask
from fedrun.robust.attacks.fang_krum import FangKrum, FangKrumParams
from fedrun.robust.attacks.fang_trmean import FangTrimmedMean, FangTrimmedMeanParams
from fedrun.robust.attacks.gaussian import Gaussian, GaussianParams
from fedrun.robust.attacks.ipm import IPM, IPMParams
from fedrun.robust.attacks.label_flip import LabelFlip, LabelFlipParams
from fedrun.robust.attacks.min_max import MinMax, MinMaxParams, halving_search
from fedrun.robust.attacks.min_sum import MinSum, MinSumParams
from fedrun.robust.attacks.scaling import Scaling, ScalingParams
from fedrun.robust.attacks.sign_flip import SignFlip, SignFlipParams
from fedrun.robust.base import AttackView, ServerView
from fedrun.robust.defences.krum import Krum, KrumParams
from fedrun.robust.defences.mean import Mean, MeanParams
from fedrun.robust.defences.trimmed_mean import trimmed_mean
from fedrun.robust.malicious import malicious_clients
from fedrun.robust.moments import coordinate_moments, coordinate_std


def updates(n: int, d: int = 25, seed: int = 0, shift: float = 1.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (shift + torch.randn(n, d, generator=g)).double()


def test_a_scaled_replacement_lands_the_attackers_model_under_the_plain_mean() -> None:
    # honest updates that cancel out: the global model moves exactly to the attacker's model X
    honest = updates(9)
    honest = honest - honest.mean(0)
    target = updates(1, seed=1)  # X - G^t, the attacker's backdoored model less the global one
    for lr in (1.0, 0.5):
        sent = Scaling(ScalingParams())(target, honest, AttackView(n=10, server_lr=lr))
        agg = Mean(MeanParams())(torch.cat([honest, sent]), ServerView())
        torch.testing.assert_close(lr * agg.value, target[0])
    p = torch.tensor([0.25], dtype=torch.float64)  # with aggregation weights: gamma = 1 / (eta p)
    assert torch.allclose(Scaling(ScalingParams())(target, None, AttackView(n=10, weights=p)), 4 * target)
    assert torch.equal(Scaling(ScalingParams(gamma=3.0))(target, None, AttackView(n=10)), 3 * target)


def test_sign_flip_negates_the_own_update_or_the_honest_mean() -> None:
    own, honest = updates(2, seed=1), updates(6)
    assert torch.equal(SignFlip(SignFlipParams())(own, honest, AttackView(n=8)), -own)
    omni = SignFlip(SignFlipParams(knowledge="omniscient"))(own, honest, AttackView(n=8))
    assert torch.equal(omni, -honest.mean(0).expand(2, 25))
    with pytest.raises(ValueError, match="omniscient"):
        SignFlip(SignFlipParams(knowledge="omniscient"))(own, None, AttackView(n=8))


def test_gaussian_replaces_or_adds_keyed_noise() -> None:
    own = updates(3)
    attack = Gaussian(GaussianParams(sigma=200.0))
    a = attack(own, None, AttackView(n=10, generator=torch.Generator().manual_seed(4)))
    b = attack(own, None, AttackView(n=10, generator=torch.Generator().manual_seed(4)))
    assert torch.equal(a, b) and 150 < float(a.std()) < 250
    added = Gaussian(GaussianParams(mode="add", sigma=0.0))(own, None, AttackView(n=10, generator=torch.Generator()))
    assert torch.equal(added, own)


def test_alie_z_max_follows_baruch_et_al() -> None:
    # n = 50 workers, m = 12 corrupted: s = 26 - 12 = 14, z = Phi^-1(36/50)
    assert z_max(50, 12) == pytest.approx(0.5828415072712162)
    assert z_max(10, 2) == pytest.approx(0.2533471031357997)  # s = 6 - 2 = 4: Phi^-1(0.6)
    own, honest = updates(4, seed=1), updates(8)
    sent = ALIE(ALIEParams())(own, honest, AttackView(n=12))  # knowledge=own: from the attackers' own updates
    want = own.mean(0) + z_max(12, 4) * own.std(0)
    assert torch.allclose(sent, want.expand(4, 25))
    single = ALIE(ALIEParams(z=2.0))(own[:1], None, AttackView(n=12))
    assert torch.equal(single[0], own[0])  # one update: no spread, mu itself


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(("r", "d"), [(1, 845), (2, 845), (5, 845), (80, 845), (80, 199_210)])
def test_coordinate_moments_by_chunks_are_the_whole_reductions_bit_for_bit(
    r: int, d: int, threads: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ALIE's mu and sigma (and min-max's, Fang et al.'s sigma), reduced by chunks of columns on the CPU, are
    ``x.mean(0)`` and the deviations' root mean square of the whole matrix, bit for bit, on one thread or two (the
    small matrices cut into chunks of 256 columns here, the last a partial one; 80 x 199,210 as a round cuts it)."""
    from fedrun.robust import moments

    if d < 1000:
        monkeypatch.setattr(moments, "MIN_BYTES", 0)
        monkeypatch.setattr(moments, "CHUNK", 256)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        x = torch.randn(r, d, generator=torch.Generator().manual_seed(r)) * torch.logspace(-6, 2, d).float()
        mean = x.mean(dim=0)
        std = ((x - mean).square().sum(dim=0) / (r - 1)).sqrt() if r > 1 else torch.zeros(d)
        got_mean, got_std = coordinate_moments(x)
        assert torch.equal(got_mean, mean) and torch.equal(got_std, std)
        assert torch.equal(coordinate_std(x), std) and torch.equal(coordinate_std(x, mean), std)
        y = x.T.contiguous().T  # column-major: not chunked, reduced whole as its own layout reduces
        y_mean = y.mean(dim=0)
        y_std = ((y - y_mean).square().sum(dim=0) / (r - 1)).sqrt() if r > 1 else torch.zeros(d)
        assert all(torch.equal(a, b) for a, b in zip(coordinate_moments(y), (y_mean, y_std), strict=True))
    finally:
        torch.set_num_threads(before)


def test_ipm_turns_the_inner_product_with_the_honest_mean_negative() -> None:
    own, honest = updates(3, seed=1), updates(7)
    sent = IPM(IPMParams())(own, honest, AttackView(n=10))
    torch.testing.assert_close(sent[0], -0.1 * honest.mean(0))
    big = IPM(IPMParams(epsilon=10.0))(own, honest, AttackView(n=10))
    agg = torch.cat([honest, big]).mean(0)
    assert float(agg @ honest.mean(0)) < 0


@pytest.mark.parametrize("perturbation", ["unit_vec", "sign", "std"])
def test_min_max_and_min_sum_meet_their_constraint_with_equality(perturbation: str) -> None:
    honest, own = updates(8), updates(2, seed=3)
    d2 = torch.cdist(honest, honest).pow(2)
    mm = MinMax(MinMaxParams(perturbation=perturbation))(own, honest, AttackView(n=10))[0]
    worst = (mm - honest).pow(2).sum(1).max()
    torch.testing.assert_close(worst, d2.max(), rtol=1e-9, atol=1e-9)
    ms = MinSum(MinSumParams(perturbation=perturbation))(own, honest, AttackView(n=10))[0]
    total = (ms - honest).pow(2).sum()
    torch.testing.assert_close(total, d2.sum(1).min(), rtol=1e-9, atol=1e-9)
    assert (mm - honest.mean(0)).norm() > 0 and (ms - honest.mean(0)).norm() > 0


def test_the_authors_search_finds_the_same_gamma_below_20_and_stops_there() -> None:
    assert halving_search(lambda g: g <= 3.7) == pytest.approx(3.7, abs=2e-5)
    assert halving_search(lambda g: g <= 50.0) < 20.0
    honest, own = updates(8), updates(2, seed=3)
    exact = MinMax(MinMaxParams(solver="exact"))(own, honest, AttackView(n=10))
    search = MinMax(MinMaxParams(solver="search"))(own, honest, AttackView(n=10))
    torch.testing.assert_close(exact, search, rtol=1e-4, atol=1e-4)


def test_fang_krum_gets_krum_to_select_the_crafted_update() -> None:
    # honest updates spread wider than their mean is long (SGD noise in high dimension): Fang et al.'s regime
    honest, own = updates(10, shift=0.05), updates(3, seed=1)
    sent = FangKrum(FangKrumParams())(own, honest, AttackView(n=13))
    assert torch.equal(sent[0], sent[2])
    direction = torch.sign(honest.mean(0))
    assert (torch.sign(sent[0]) == -direction).all()  # against the honest direction
    chosen = Krum(KrumParams())(torch.cat([honest, sent]), ServerView(f=3))
    assert chosen.selected[10:].any()


def test_fang_trimmed_mean_pushes_each_coordinate_against_the_honest_direction() -> None:
    honest, own = updates(12, shift=0.5), updates(3, seed=1)
    view = AttackView(n=15, generator=torch.Generator().manual_seed(0))
    sent = FangTrimmedMean(FangTrimmedMeanParams())(own, honest, view)
    s = torch.sign(honest.mean(0))
    hi, lo = honest.max(0).values, honest.min(0).values
    beyond = torch.where(s < 0, sent >= hi, sent <= lo)
    assert beyond.all()
    # within the paper's interval: at most b = 2 times the extreme (or half of it)
    edge = torch.where(s < 0, hi, lo)
    assert (sent.abs() <= 2 * edge.abs() + 1e-12).all() and (sent.abs() >= edge.abs() / 2 - 1e-12).all()
    clean, attacked = trimmed_mean(honest, 3), trimmed_mean(torch.cat([honest, sent]), 3)
    assert ((attacked - clean) * s < 0).all()
    partial = FangTrimmedMean(FangTrimmedMeanParams(knowledge="own"))(own, None, view)
    mu, sigma = own.mean(0), own.std(0)
    gap = (partial - mu) * -torch.sign(mu)
    assert ((gap >= 3 * sigma - 1e-9) & (gap <= 4 * sigma + 1e-9)).all()


def test_label_flip_reverses_the_classes_of_the_attackers_rows_only() -> None:
    y = torch.tensor([[0, 1, 9], [3, 4, 5]])
    attacker = torch.tensor([True, False])
    out = LabelFlip(LabelFlipParams()).poison({"x": torch.zeros(2, 3, 4), "y": y}, 10, attacker)
    assert out["y"].tolist() == [[9, 8, 0], [3, 4, 5]]
    targeted = LabelFlip(LabelFlipParams(source=3, target=7)).poison({"y": y}, 10)
    assert targeted["y"].tolist() == [[0, 1, 9], [7, 4, 5]]
    with pytest.raises(ConfigError, match=r"attack\.target: 12 is not a class; valid: 0\.\.9"):
        LabelFlip(LabelFlipParams(source=1, target=12)).check(10, (1, 28, 28))
    with pytest.raises(ConfigError, match=r"attack\.source: source and target are set together"):
        LabelFlip(LabelFlipParams(source=1))


def test_backdoor_triggers_and_relabels_a_fraction_of_each_attacker_batch() -> None:
    hp = BackdoorParams(target=2, poison_fraction=0.25, size=3)
    x = torch.zeros(2, 8, 1, 10, 10, dtype=torch.uint8)
    y = torch.tensor([[5] * 8, [6] * 8])
    out = Backdoor(hp).poison({"x": x, "y": y}, 10, torch.tensor([True, False]))
    assert out["y"][0].tolist() == [2, 2, 5, 5, 5, 5, 5, 5] and out["y"][1].tolist() == [6] * 8
    mask = trigger_mask((10, 10), hp)
    assert int(mask.sum()) == 5 and mask[9, 9] and not mask[9, 8]  # checker on the bottom-right 3 x 3
    assert (out["x"][0, :2, 0][:, mask] == 255).all() and not out["x"][0, 2:].any() and not out["x"][1].any()
    one = Backdoor(hp).poison({"x": torch.zeros(8, 1, 10, 10), "y": torch.full((8,), 5)}, 10)
    assert one["y"].tolist() == [2, 2] + [5] * 6 and one["x"].max() == 1.0
    normalised = apply_trigger(torch.zeros(3, 10, 10), BackdoorParams(pattern="square"), torch.tensor([1.0, 2, 3]))
    assert normalised[2, 9, 9] == 3 and normalised[0, 6, 6] == 1 and normalised[0, 5, 5] == 0
    assert attack_success(torch.tensor([2, 2, 0, 2]), torch.tensor([1, 2, 3, 4]), 2) == (2, 3)
    with pytest.raises(ConfigError, match=r"attack\.target: 10 is not a class; valid: 0\.\.9"):
        Backdoor(BackdoorParams(target=10)).check(10, (1, 28, 28))
    with pytest.raises(ConfigError, match=r"poison_fraction: must be in \(0.0, 1.0\]"):
        BackdoorParams(poison_fraction=0.0)


def test_the_malicious_set_is_a_seeded_fraction_of_all_clients() -> None:
    a = malicious_clients(0, 100, 0.2)
    assert len(a) == 20 and np.array_equal(a, np.sort(a)) and a.dtype == np.int64
    assert np.array_equal(a, malicious_clients(0, 100, 0.2)) and not np.array_equal(a, malicious_clients(1, 100, 0.2))
    assert len(malicious_clients(0, 10, 0.0)) == 0 and len(malicious_clients(3, 7, 0.3)) == round(2.1)
    for bad in (1.0, -0.1, math.nan):
        with pytest.raises(ConfigError, match=r"^attack\.fraction: must"):
            malicious_clients(0, 10, bad)


def test_attack_settings_are_checked_in_one_line() -> None:
    with pytest.raises(ConfigError, match=r"attack\.knowledge: invalid value 'all'; valid: own, omniscient"):
        build_params(ALIEParams, {"knowledge": "all"}, "attack")
    with pytest.raises(ConfigError, match=r"attack\.b: must be in \(1.0, inf\]"):
        build_params(FangTrimmedMeanParams, {"b": 1.0}, "attack")
