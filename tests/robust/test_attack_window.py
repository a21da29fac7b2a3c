"""An attack's window of rounds (``attack.start_round``, ``attack.end_round``; fedrun/capabilities/attack.py): before
and after it the attackers are honest clients, bit for bit a run without the attack; in it they are today's attack,
bit for bit; the default window is every round, with the identity of the attacks of before it existed; a data and a
model attack both keep to it, on the sequential, vectorised and stacked engines, and a resume across its edge is
the uninterrupted run."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from fedrun.capabilities.attack import Attack
from fedrun.config.identity import config_key, resumable
from fedrun.config.schema import RunSpec
from fedrun.robust.malicious import malicious_clients
from fedrun.run.stacking import Candidate, plan_stacks
from tests.engines.test_stacked import assert_same, metrics, solo_and_stacked
from tests.engines.test_stacked import spec as stack_spec
from tests.run.run_util import finished_run, killed_then_resumed, run_in

SMALL = (
    "experiment=smoke", "data.max_train_samples=600", "data.max_test_samples=300", "fl.clients=10", "fl.rounds=4",
    "model.hidden=[16]", "hardware.threads=1", "proxy.per_class=0",
)  # fmt: skip
ATTACKS = {
    "label_flip": ("attack=label_flip",),  # data poisoning
    "backdoor": ("attack=backdoor", "attack.target=3", "attack.poison_fraction=0.5"),
    "sign_flip": ("attack=sign_flip", "attack.scale=4"),  # a model attack
}
SHARED = ["round", "test_acc", "test_loss", "train_loss", "clients"]  # the columns of a run with and without attack


def _window(first: int, last: int) -> tuple[str, str]:
    return f"attack.start_round={first}", f"attack.end_round={last}"


def _rows(a: pd.DataFrame, rounds: list[int]) -> pd.DataFrame:
    return a[a["round"].isin(rounds)][[c for c in SHARED if c in a]].reset_index(drop=True)


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_the_attackers_are_honest_outside_the_window_and_attack_in_it(
    tmp_path: Path, make_spec: Callable[..., RunSpec], attack: str
) -> None:
    over = (*SMALL, *ATTACKS[attack])
    none = run_in(tmp_path, "none", make_spec(*SMALL))
    always = run_in(tmp_path, "always", make_spec(*over))
    late, summary = finished_run(tmp_path, "late", make_spec(*over, *_window(3, 3)))
    early = run_in(tmp_path, "early", make_spec(*over, *_window(1, 2)))
    # before the window: the run without an attack, bit for bit; in it, not
    pd.testing.assert_frame_equal(_rows(late, [1, 2]), _rows(none, [1, 2]), check_exact=True)
    assert late["test_loss"].iloc[2] != none["test_loss"].iloc[2]
    # in the window: today's attack, bit for bit (the attackers' poisoned samples read in its rounds only); after it,
    # honest again
    pd.testing.assert_frame_equal(_rows(early, [1, 2]), _rows(always, [1, 2]), check_exact=True)
    assert early["test_loss"].iloc[2] != always["test_loss"].iloc[2]
    if "attack_uploads" in late:  # a model attack rewrites the attackers' uploads in the window's rounds only
        assert late["attack_uploads"].tolist() == [0, 0, 2, 0] and early["attack_uploads"].tolist() == [2, 2, 0, 0]
    if attack == "backdoor":  # the attack success rate of every evaluated round, also after the window
        assert late["asr"].notna().all() and early["asr"].notna().all()
    bad = malicious_clients(0, 10, 0.2).tolist()  # the same attackers, drawn from the seed
    assert summary["attack"]["rounds"] == [3, 3] and summary["attack"]["malicious_clients"] == bad


def test_the_default_window_is_every_round_and_keeps_the_attacks_identity(make_spec: Callable[..., RunSpec]) -> None:
    spec = make_spec(*SMALL, *ATTACKS["sign_flip"])
    settings = spec.sections["attack"]
    assert (settings.start_round, settings.end_round) == (1, None) and not settings.windowed
    explicit = make_spec(*SMALL, *ATTACKS["sign_flip"], "attack.start_round=1", "attack.end_round=null")
    assert explicit.sections["attack"] == settings
    # a run of before the window existed (its config without the keys) keeps its folder and resumes
    raw = dict(spec.raw)
    old = {**raw, "attack": {k: v for k, v in raw["attack"].items() if k not in ("start_round", "end_round")}}
    assert config_key(raw) == config_key(old) and resumable(raw) == resumable(old)
    windowed = make_spec(*SMALL, *ATTACKS["sign_flip"], "attack.start_round=2")
    assert config_key(windowed.raw) != config_key(raw)
    assert Attack.words(settings) == "sign_flip attack (20% malicious)" and Attack.tag(settings) == "sign_flip0.2"


def test_the_run_says_its_window() -> None:
    from fedrun.robust.settings import AttackSettings

    once = AttackSettings("scaling", 0.1, start_round=5, end_round=5)
    assert Attack.words(once) == "scaling attack (10% malicious, rounds 5-5)" and Attack.tag(once) == "scaling0.1-r5-5"
    late = AttackSettings("backdoor", 0.1, start_round=5)
    assert Attack.words(late) == "backdoor attack (10% malicious, from round 5)" and Attack.tag(late).endswith("-r5-")


@pytest.mark.parametrize(
    ("attack", "window", "k"),
    [("backdoor_replace", (3, 3), 2), ("label_flip", (2, 3), 3), ("sign_flip", (2, 2), 2)],
)
def test_a_resume_across_the_windows_edge_is_the_uninterrupted_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make_spec: Callable[..., RunSpec], attack: str,
    window: tuple[int, int], k: int,
) -> None:  # fmt: skip
    over = (*ATTACKS["backdoor"], "attack.replace=true") if attack == "backdoor_replace" else ATTACKS[attack]
    spec = make_spec(*SMALL, "checkpoint.every=1", *over, *_window(*window))
    _, full, resumed = killed_then_resumed(spec, tmp_path, monkeypatch, k)
    pd.testing.assert_frame_equal(full, resumed, check_exact=True)


def test_the_engines_agree_and_jobs_of_other_windows_stack_each_as_alone(
    tmp_path: Path, make_spec: Callable[..., RunSpec]
) -> None:
    over = (*SMALL, *ATTACKS["backdoor"], "attack.replace=true", *_window(2, 3))
    seq = run_in(tmp_path, "seq", make_spec(*over, "hardware.engine=sequential"))
    vec = run_in(tmp_path, "vec", make_spec(*over, "hardware.engine=vectorised"))
    assert seq["attack_uploads"].tolist() == vec["attack_uploads"].tolist() == [0, 2, 2, 0]
    pd.testing.assert_series_equal(seq["test_loss"], vec["test_loss"], rtol=1e-4, atol=1e-5)
    specs = [
        stack_spec("seed=0", "fl.rounds=3", "attack=backdoor", "attack.fraction=0.25"),
        stack_spec("seed=0", "fl.rounds=3", "attack=backdoor", "attack.fraction=0.25", *_window(2, 2)),
        stack_spec("seed=0", "fl.rounds=3", "attack=sign_flip", "attack.fraction=0.25", *_window(1, 1)),
    ]
    assert plan_stacks([Candidate(i, s) for i, s in enumerate(specs)]).groups == [[0, 1, 2]]
    (tmp_path / "stack").mkdir()
    pairs = solo_and_stacked(tmp_path / "stack", specs)
    assert_same(pairs)
    assert not metrics(pairs[1][0]).equals(metrics(pairs[0][0]))  # (the window changed the run)
