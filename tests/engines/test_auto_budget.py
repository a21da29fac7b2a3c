"""``engine=auto`` times its engines only when the probe costs at most a tenth of the run, reuses a measured
choice for the same model, cohort and machine, and says in ``summary.json`` how the choice was made (issue 51:
the probe took 35-61 s on a loaded 2-core machine, most of a 3-round run). The decision, not its timings."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from fedrun.config.schema import FLConfig, RunSpec
from fedrun.engines import auto, auto_budget
from fedrun.engines.auto_budget import BUDGET, FIRST_CALL_STEPS, ProbeBudget, probe_budget, probe_steps, run_steps
from fedrun.run.experiment import build_experiment
from fedrun.run.loop import run
from tests.engines.test_engine_auto import TINY

BOTH = ["sequential", "vectorised"]
# fedrun's default run (make run): 20 clients of about 3,000 samples, B = 50, one epoch: 61 steps a round
DEFAULT_SIZES = [3000] * 20


def test_the_run_is_counted_in_local_steps_of_its_trained_clients() -> None:
    fl = FLConfig(clients=4, rounds=3, participation=0.5, batch_size=50, local_epochs=2)
    # cohort 2; clients of 100, 120, 0, 60 samples: 4, 6, 0, 4 steps (two epochs), mean 3.5, +1 for each client
    assert run_steps(fl, [100, 120, 0, 60]) == 3 * 2 * (3.5 + 1)
    assert run_steps(dataclasses.replace(fl, local_steps=10), [100, 120, 0, 60]) == 3 * 2 * (7.5 + 1)
    assert run_steps(dataclasses.replace(fl, train_all=True), [100, 120, 0, 60]) == 3 * 4 * (3.5 + 1)


def test_the_probe_pays_a_first_call_on_every_engine_but_the_sequential_one() -> None:
    per_engine = (2 + 2 * 16) * (2 + 1)  # warm-up on 2 clients, then 2 timed rounds of 16, 2 steps (+1) each
    assert probe_steps(["sequential"], 40) == per_engine
    assert probe_steps(BOTH, 40) == 2 * per_engine + FIRST_CALL_STEPS
    assert probe_steps(BOTH, 4) == 2 * (2 + 2 * 4) * 3 + FIRST_CALL_STEPS  # a narrower cohort probes fewer


@pytest.mark.parametrize(("rounds", "fits"), [(3, False), (5, False), (6, True), (30, True), (50, True)])
def test_a_short_default_run_is_not_timed_and_a_long_one_is(rounds: int, fits: bool) -> None:
    budget = probe_budget(BOTH, FLConfig(rounds=rounds), DEFAULT_SIZES, 20)
    assert budget.fits == fits and budget.fits == (budget.share <= BUDGET)


def test_the_record_says_both_costs_and_the_budget() -> None:
    assert ProbeBudget(704.4, 3720.0).record() == {"probe_steps": 704, "run_steps": 3720, "budget": BUDGET}
    assert not ProbeBudget(1.0, 0.0).fits


def _choose(spec: RunSpec, cache: Path) -> dict:
    """``auto``'s decision for ``spec`` (its experiment built on the sequential engine: building it with ``auto``
    would decide once already)."""
    exp = build_experiment(dataclasses.replace(spec, hardware=dataclasses.replace(spec.hardware, engine="sequential")))
    return auto.choose(spec.hardware, exp.algorithm, exp.fed, spec.fl, spec.seed, str(cache))


def test_a_run_too_small_to_time_gets_the_sequential_engine_untimed_and_nothing_cached(
    make_spec: Callable[..., RunSpec], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(auto, "_CHOICES", {})
    monkeypatch.setattr(auto, "measure", lambda *a: pytest.fail("timed a run smaller than the probe"))
    choice = _choose(make_spec(*TINY), tmp_path)
    assert choice["engine"] == "sequential" and choice["how"] == "not measured"
    assert choice["probe_steps"] > BUDGET * choice["run_steps"] and choice["budget"] == BUDGET
    assert choice["reason"].startswith("the run is too small to time: the probe (~")
    assert not (tmp_path / "engine-auto.json").exists()  # a larger run of the same key still measures


def test_a_run_large_enough_is_timed_once_and_then_read_from_the_cache_even_when_small(
    make_spec: Callable[..., RunSpec], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(auto, "_CHOICES", {})
    timed = {"engine": "vectorised", "clients": 4, "steps": 2, "sequential_s": 2.0, "vectorised_s": 1.0}
    calls: list[int] = []
    monkeypatch.setattr(auto, "measure", lambda *a: calls.append(1) or dict(timed))
    long = _choose(make_spec(*TINY, "fl.rounds=400"), tmp_path)
    assert calls == [1] and long["how"] == "measured" and long["engine"] == "vectorised"
    assert long["probe_steps"] <= BUDGET * long["run_steps"] and long["probe_seconds"] >= 0
    monkeypatch.setattr(auto, "_CHOICES", {})  # a new process: the file
    short = _choose(make_spec(*TINY), tmp_path)  # too small to time, but measured before: the measurement
    assert calls == [1] and short["how"] == "cache" and short["engine"] == "vectorised"


def test_the_probe_trains_its_own_few_steps_not_the_runs_epochs(
    make_spec: Callable[..., RunSpec], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the engines train with the algorithm's ``round_fl`` (its own fl), so the probe trained every
    client's full local epochs and cost rounds of the run."""
    spec = make_spec(*TINY, "fl.local_epochs=3")
    exp = build_experiment(spec)
    seen: list[tuple[int | None, int | None, int]] = []

    def fake_round(engine, clients, states, hw) -> float:  # noqa: ANN001
        seen.append((engine.fl.local_steps, engine.algorithm.round_fl(0).local_steps, len(clients)))
        return 1.0 if type(engine).__name__ == "SequentialEngine" else 2.0

    monkeypatch.setattr(auto, "_time_round", fake_round)
    choice = auto.measure(spec.hardware, exp.algorithm, exp.fed, spec.fl, spec.seed, 4)
    assert choice["engine"] == "sequential" and choice["steps"] == auto_budget.PROBE_STEPS == 2
    assert {(a, b) for a, b, _ in seen} == {(2, 2)} and [n for *_, n in seen] == [2, 2, 4, 4, 4, 4]
    assert exp.algorithm.round_fl(0).local_steps is None  # the run's own algorithm is left as it was


def test_the_cache_key_names_the_machine(make_spec: Callable[..., RunSpec], monkeypatch: pytest.MonkeyPatch) -> None:
    spec = make_spec(*TINY)
    exp = build_experiment(spec)
    here = auto.probe_key(spec.hardware, exp.algorithm, exp.fed, spec.fl, 4)
    monkeypatch.setattr(auto.platform, "node", lambda: "another-host")
    assert auto.probe_key(spec.hardware, exp.algorithm, exp.fed, spec.fl, 4) != here


def test_summary_json_says_how_the_engine_was_chosen(make_spec: Callable[..., RunSpec], tmp_path: Path) -> None:
    run(make_spec(*TINY), tmp_path)
    selection = json.loads((tmp_path / "summary.json").read_text())["engine_selection"]
    assert selection["how"] == "not measured" and selection["engine"] == "sequential"
