"""The defence capability (fedrun/capabilities/defence.py) in runs: the mean rule is the run without a defence bit for
bit; reruns with an attack and a defence (their keyed randomness included) are bit-identical; a run killed with
centered clipping's state (and FLTrust's root update) resumes exactly; the sequential and vectorised engines agree;
a cohort too small for the rule keeps w^t and says so; Krum keeps accuracy under sign flipping where FedAvg
collapses."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from fedrun.capabilities.defence import DefenceCapability
from fedrun.config.location import CONF_DIR
from fedrun.config.schema import RunSpec
from fedrun.robust.base import DEFENCES, PREAGGREGATORS
from tests.run.run_util import finished_run, killed_then_resumed, run_in

SMALL = (
    "experiment=smoke", "data.max_train_samples=600", "data.max_test_samples=300", "fl.clients=10", "fl.rounds=3",
    "model.hidden=[16]", "hardware.threads=1",
)  # fmt: skip
DEFENCE_COLUMNS = ("defence_", "attack_uploads")


def _model_columns(rows: pd.DataFrame) -> pd.DataFrame:
    return rows[[c for c in rows.columns if not c.startswith(DEFENCE_COLUMNS)]]


def test_every_defence_has_its_option_and_every_option_a_defence() -> None:
    options = {p.stem for p in (CONF_DIR / "defence").glob("*.yaml")} - {"none"}
    assert options == set(DEFENCES.names())
    choices = DefenceCapability.choices()
    assert choices == {"name": ["none", *DEFENCES.names()], "pre": ["none", *PREAGGREGATORS.names()]}


@pytest.mark.parametrize("attack", ["none", "sign_flip"])
def test_the_mean_rule_is_the_run_without_a_defence_bit_for_bit(
    tmp_path: Path, make_spec: Callable[..., RunSpec], attack: str
) -> None:
    plain = run_in(tmp_path, "plain", make_spec(*SMALL, f"attack={attack}"))
    mean = run_in(tmp_path, "mean", make_spec(*SMALL, f"attack={attack}", "defence=mean"))
    assert "defence_f" in mean and (mean["defence_skipped"] == 0).all()
    pd.testing.assert_frame_equal(_model_columns(mean), _model_columns(plain), check_exact=True)


def test_reruns_with_an_attack_and_a_defence_are_bit_identical(
    tmp_path: Path, make_spec: Callable[..., RunSpec]
) -> None:
    # the attack's draws (fang_trmean's uniform values) and the defence's (bucketing's shuffle) are keyed
    spec = make_spec(*SMALL, "attack=fang_trmean", "defence=trimmed_mean", "defence.pre=bucketing", "defence.f=1")
    a, b = run_in(tmp_path, "a", spec), run_in(tmp_path, "b", spec)
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    assert (a["attack_uploads"] == 2).all()


@pytest.mark.parametrize(
    "overrides",
    [
        ("attack=ipm", "attack.epsilon=0.5", "defence=centered_clipping", "defence.tau=0.5"),
        ("attack=gaussian", "defence=fltrust", "fl.participation=0.5"),
        ("attack=backdoor", "defence=multi_krum", "defence.pre=nnm"),
    ],
    ids=["centered_clipping", "fltrust", "nnm_multi_krum_backdoor"],
)
def test_a_killed_run_resumes_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make_spec: Callable[..., RunSpec], overrides: tuple[str, ...]
) -> None:
    spec = make_spec(*SMALL, "fl.rounds=4", "checkpoint.every=1", *overrides)
    seen = []

    def keeps_state(ck: object) -> None:
        seen.append(getattr(ck, "capabilities", {}).get("defence", {}))

    _, full, resumed = killed_then_resumed(spec, tmp_path, monkeypatch, 2, keeps_state)
    pd.testing.assert_frame_equal(full, resumed, check_exact=True)
    if "defence=centered_clipping" in overrides:
        assert seen and "previous" in seen[0]


def test_the_engines_agree(tmp_path: Path, make_spec: Callable[..., RunSpec]) -> None:
    over = (*SMALL, "attack=sign_flip", "attack.scale=4", "defence=multi_krum", "fl.participation=0.5")
    seq = run_in(tmp_path, "seq", make_spec(*over, "hardware.engine=sequential"))
    vec = run_in(tmp_path, "vec", make_spec(*over, "hardware.engine=vectorised"))
    for col in ("defence_kept", "defence_kept_malicious", "attack_uploads", "clients"):
        assert seq[col].tolist() == vec[col].tolist(), col
    pd.testing.assert_series_equal(seq["test_loss"], vec["test_loss"], rtol=1e-4, atol=1e-5)


def test_a_cohort_too_small_for_the_rule_keeps_the_model_and_says_so(
    tmp_path: Path, make_spec: Callable[..., RunSpec], caplog: pytest.LogCaptureFixture
) -> None:
    # Bernoulli cohorts of 10 clients at 0.4: Krum with f = 1 needs 5 uploads, and some rounds have fewer
    spec = make_spec(*SMALL, "fl.rounds=8", "fl.sampling=bernoulli", "fl.participation=0.4", "defence=krum",
                     "defence.f=1")  # fmt: skip
    rows, summary = finished_run(tmp_path, "run", spec)
    skipped = rows["defence_skipped"] == 1
    assert skipped.any() and (rows.loc[skipped, "clients"] < 5).all() and (rows.loc[~skipped, "clients"] >= 5).all()
    for i in skipped[skipped].index:
        if i > 0:  # w^t kept (every upload w^t, up to the float rounding of their mean): the previous round's loss
            assert rows.loc[i, "test_loss"] == pytest.approx(rows.loc[i - 1, "test_loss"], rel=1e-6)
            assert rows.loc[i, "test_acc"] == rows.loc[i - 1, "test_acc"]
    assert summary["defence"]["skipped_rounds"] == int(skipped.sum())
    logged = [r.getMessage() for r in caplog.records if "defence krum skipped" in r.getMessage()]
    assert len(logged) == int(skipped.sum()) and "krum needs at least 5 uploads" in logged[0]


def test_krum_keeps_accuracy_under_sign_flipping_where_fedavg_collapses(
    tmp_path: Path, make_spec: Callable[..., RunSpec]
) -> None:
    over = (*SMALL, "data.max_train_samples=2000", "fl.rounds=6", "partition=iid", "attack=sign_flip",
            "attack.scale=4", "attack.fraction=0.3")  # fmt: skip
    fedavg = run_in(tmp_path, "fedavg", make_spec(*over))
    krum = run_in(tmp_path, "krum", make_spec(*over, "defence=krum"))
    assert krum["test_acc"].iloc[-1] > 0.5 and (krum["defence_kept_malicious"] == 0).all()
    assert fedavg["test_acc"].iloc[-1] < 0.3


@pytest.mark.parametrize(
    "overrides",
    [
        (
            "attack=alie",
            "defence=multi_krum",
            "compression=topk",
            "compression.ratio=0.1",
            "compression.error_feedback=true",
        ),
        ("attack=sign_flip", "defence=median", "privacy=local", "privacy.noise_multiplier=0.5", "privacy.clip=1"),
        ("attack=ipm", "defence=geomed", "algorithm=fedadam"),
        ("attack=label_flip", "defence=krum", "defence.f=1", "system=dropout", "algorithm=fedprox"),
        ("attack=backdoor", "defence=trimmed_mean", "privacy=sample", "privacy.noise_multiplier=0.5"),
    ],
    ids=["topk_ef", "local_dp", "fedadam", "dropout_fedprox", "dp_sgd"],
)
def test_it_composes_with_the_other_capabilities(
    tmp_path: Path, make_spec: Callable[..., RunSpec], overrides: tuple[str, ...]
) -> None:
    rows, summary = finished_run(tmp_path, "run", make_spec(*SMALL, *overrides))
    assert rows["test_acc"].notna().all() and "defence_f" in rows
    assert summary["defence"]["name"] == overrides[1].split("=")[1] and summary["attack"]["malicious_clients"]
