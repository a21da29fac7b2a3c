"""Whole runs under a system model: p = 0 dropout and 0% stragglers equal the ideal system bit for bit, the same
seed gives the same system on every engine and for every method, a killed run resumes to the same numbers and
clock, and a deadline nobody meets records zero-client rounds instead of crashing."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from fedrun.config.schema import RunSpec
from fedrun.core.errors import ConfigError
from fedrun.run.loop import run
from tests.conftest import main_exit_code
from tests.run.run_util import killed_then_resumed, run_in

TRACE = Path(__file__).with_name("sample_trace.json")
SMALL = (
    "data.max_train_samples=600",
    "data.max_test_samples=200",
    "fl.clients=10",
    "fl.rounds=4",
    "fl.participation=0.6",
    "fl.local_epochs=3",
    "fl.batch_size=20",
    "model.hidden=[32]",
    "hardware.threads=1",
    "checkpoint.every=1",
)
SYSTEM_COLUMNS = ["sim_seconds", "sim_clock", "dropped", "stragglers", "late", "over_selected"]
PARTIAL = ("system.dropout=0.3", "system.stragglers=0.5", "system.straggler_policy=partial", "system.devices=tiers")


@pytest.mark.parametrize(
    "overrides",
    [
        ("system.dropout=0.0", "system.devices=tiers"),
        ("system.stragglers=0.0", "system.straggler_policy=partial", "system.devices=tiers"),
        ("system.deadline=1000000.0",),
    ],
)
def test_a_system_that_drops_nobody_equals_ideal_bit_for_bit(
    tmp_path: Path, make_spec: Callable[..., RunSpec], overrides: tuple[str, ...]
) -> None:
    ideal = run_in(tmp_path, "ideal", make_spec(*SMALL))
    other = run_in(tmp_path, "other", make_spec(*SMALL, *overrides))
    assert list(ideal.columns) == [c for c in other.columns if c not in SYSTEM_COLUMNS]  # ideal adds none
    pd.testing.assert_frame_equal(other[list(ideal.columns)], ideal, check_exact=True)
    assert (other[["dropped", "stragglers", "late"]] == 0).all().all() and (other["sim_seconds"] > 0).all()


def test_same_system_on_every_engine_and_for_every_method(tmp_path: Path, make_spec: Callable[..., RunSpec]) -> None:
    seq = run_in(tmp_path, "seq", make_spec(*SMALL, *PARTIAL))
    vec = run_in(tmp_path, "vec", make_spec(*SMALL, *PARTIAL, "hardware.engine=vectorised"))
    nova = run_in(tmp_path, "nova", make_spec(*SMALL, *PARTIAL, "algorithm=fednova"))
    assert seq["dropped"].sum() > 0 and seq["stragglers"].sum() > 0
    # the clock is counted from steps and bytes, never timed: the same bits on both engines
    pd.testing.assert_frame_equal(
        seq[SYSTEM_COLUMNS + ["clients"]], vec[SYSTEM_COLUMNS + ["clients"]], check_exact=True
    )
    pd.testing.assert_series_equal(seq["test_acc"], vec["test_acc"], atol=0.02, check_exact=False)
    # another method under the same seed: the same clients fail and straggle
    pd.testing.assert_frame_equal(seq[["dropped", "stragglers", "clients"]], nova[["dropped", "stragglers", "clients"]])


def test_killed_and_resumed_run_gives_the_same_numbers_and_clock(
    tmp_path: Path, make_spec: Callable[..., RunSpec], monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = make_spec(*SMALL, *PARTIAL, "system.deadline=0.05")
    _, full, resumed = killed_then_resumed(spec, tmp_path, monkeypatch, 2)
    pd.testing.assert_frame_equal(resumed, full, check_exact=True)
    assert full["late"].sum() > 0  # the deadline bit, so the resumed clock decided something


def test_a_deadline_nobody_meets_records_empty_rounds(tmp_path: Path, make_spec: Callable[..., RunSpec]) -> None:
    m = run_in(tmp_path, "none", make_spec(*SMALL, "system.deadline=0.000001"))
    assert (m["clients"] == 0).all() and (m["late"] == 6).all() and (m["bytes_up"] == 0).all()
    assert m["test_acc"].nunique() == 1  # w^t kept every round: the initial model's accuracy
    assert list(m["sim_clock"]) == pytest.approx([1e-6, 2e-6, 3e-6, 4e-6])
    everyone = run_in(tmp_path, "drop", make_spec(*SMALL, "system.dropout=1.0"))
    assert (everyone["clients"] == 0).all() and everyone["local_loss"].isna().all()


def test_over_selection_keeps_the_first_cohort_many(tmp_path: Path, make_spec: Callable[..., RunSpec]) -> None:
    m = run_in(tmp_path, "over", make_spec(*SMALL, "system.over_selection=1.5", "system.devices=tiers"))
    assert (m["clients"] == 6).all() and (m["over_selected"] == 3).all()  # ceil(1.5 x 6) = 9 sampled, 6 kept


def test_a_trace_runs_and_bad_input_is_refused(tmp_path: Path, make_spec: Callable[..., RunSpec]) -> None:
    m = run_in(tmp_path, "trace", make_spec(*SMALL, "system.devices=trace", f"system.trace={TRACE}"))
    assert (m["sim_seconds"] > 0).all()
    with pytest.raises(ConfigError, match="system.trace: .*client '5' is not one of this run's clients 0..4"):
        run(make_spec(*SMALL, "fl.clients=5", "system.devices=trace", f"system.trace={TRACE}"), tmp_path / "five")
    assert not (tmp_path / "five" / "metrics.csv").exists()
    with pytest.raises(ConfigError, match="system.straggler_work: epochs"):
        make_spec(*SMALL, "fl.local_epochs=1", "system.stragglers=0.2")


def test_cli_refuses_bad_rates_and_traces_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.chdir(tmp_path)  # ``fedrun`` in-process (the console script's code path): exit code and stderr
    where = [f"hydra.run.dir={tmp_path / 'run'}", f"cache_dir={tmp_path / 'cache'}"]
    assert main_exit_code(monkeypatch, ["fedrun", "system.dropout=-0.1", "hardware.threads=1", *where]) == 2
    assert capsys.readouterr().err.strip() == "fedrun: error: system.dropout: must be in [0.0, 1.0], got -0.1"
    argv = ["fedrun", *SMALL, "fl.clients=5", "system.devices=trace", f"system.trace={TRACE}", *where]
    assert main_exit_code(monkeypatch, argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "system.trace:" in err and "client '5' is not one of this run's clients 0..4" in err
    assert not (tmp_path / "run" / "metrics.csv").exists()


def test_fednova_sees_the_true_step_counts(
    tmp_path: Path, make_spec: Callable[..., RunSpec], monkeypatch: pytest.MonkeyPatch
) -> None:
    from fedrun.algorithms.fednova import FedNova
    from fedrun.data.federated import num_local_steps

    seen: list[tuple[list[int], list[int]]] = []
    aggregate = FedNova.aggregate

    def spy(self, params, server_state, uploads, weights, info):  # noqa: ANN001, ANN202
        seen.append((info.clients.tolist(), info.steps.tolist()))
        return aggregate(self, params, server_state, uploads, weights, info)

    monkeypatch.setattr(FedNova, "aggregate", spy)
    spec = make_spec(*SMALL, "algorithm=fednova", "system.stragglers=0.5", "system.straggler_policy=partial")
    m = run_in(tmp_path, "nova", spec)
    assert (m["stragglers"] == 3).all() and (m["clients"] == 6).all()
    from fedrun.run.experiment import build_experiment

    sizes = build_experiment(spec).fed.sizes
    for clients, steps in seen:
        full = [num_local_steps(int(sizes[c]), spec.fl) for c in clients]
        cut = [s for s, f in zip(steps, full, strict=True) if s < f]
        assert len(cut) == 3  # the three stragglers ran fewer steps, and FedNova's a_i is told so
        assert all(s % (f // spec.fl.local_epochs) == 0 for s, f in zip(steps, full, strict=True))  # whole epochs
