"""One attempt at a run (fedrun/run/attempt.py): each outcome, typed, with the run directory as the contract says."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest

from fedrun.run import loop
from fedrun.run.attempt import Outcome, attempt
from fedrun.storage.lock import run_dir_lock
from fedrun.storage.rundir import ERROR_LOG, HYDRA_DIR, RunDir
from fedrun.storage.status import Status
from tests.conftest import compose_cfg, dir_snapshot

ONE = ["experiment=smoke", "data.max_train_samples=300", "data.max_test_samples=100", "fl.clients=4", "fl.rounds=1",
       "model.hidden=[8]", "hardware.threads=1", "hardware.engine=sequential", "output.plots=false",
       "output.quiet=true"]  # fmt: skip


def _cfg(tmp_path: Path, *overrides: str):  # noqa: ANN202 - a DictConfig
    return compose_cfg([*ONE, f"cache_dir={tmp_path / 'cache'}", *overrides])


def test_a_run_completes_then_is_skipped_with_the_same_objective(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    first = attempt(_cfg(tmp_path), run_dir)
    assert (first.outcome, first.status) == (Outcome.COMPLETED, Status.COMPLETED)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert first.objective == summary["test_acc_last_k"] and first.summary is not None
    before = dir_snapshot(run_dir)
    again = attempt(_cfg(tmp_path), run_dir)
    assert (again.outcome, again.status, again.objective) == (Outcome.SKIPPED, Status.COMPLETED, first.objective)
    assert dir_snapshot(run_dir) == before
    with pytest.raises(AttributeError):
        again.outcome = Outcome.FAILED  # type: ignore[misc]  # frozen


def test_bad_input_is_refused_leaving_error_txt_beside_hydras_record(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    (run_dir / HYDRA_DIR).mkdir(parents=True)  # Hydra's record of this attempt
    result = attempt(_cfg(tmp_path, "fl.clients=0"), run_dir, record=HYDRA_DIR)
    assert result.outcome is Outcome.REFUSED and result.message.startswith("fl.clients")
    assert sorted(p.name for p in run_dir.iterdir()) == [HYDRA_DIR, "error.txt"]


def test_a_held_run_dir_is_busy_and_left_as_it_was(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text("seed: 5\n")  # the other process's run
    with run_dir_lock(run_dir):
        before = dir_snapshot(run_dir)
        result = attempt(_cfg(tmp_path, "fl.clients=0"), run_dir)  # bad input too: still nothing written
    assert result.outcome is Outcome.REFUSED and dir_snapshot(run_dir) == before
    with run_dir_lock(run_dir):
        result = attempt(_cfg(tmp_path), run_dir)
    assert result.outcome is Outcome.BUSY and "in use by another fedrun process" in result.message
    assert dir_snapshot(run_dir) == before


def test_a_failure_whose_traceback_cannot_be_saved_does_not_name_error_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 32 point 8: a full disk at start-up named an error.log that was never written."""

    def full(rd: RunDir, text: str) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    def run(spec: object, rd: RunDir, **kwargs: object) -> dict:
        rd.start("seed: 0\n")
        raise OSError(errno.ENOSPC, "No space left on device", "partition.csv")

    monkeypatch.setattr(RunDir, "write_error_log", full)
    monkeypatch.setattr(loop, "run", run)
    result = attempt(_cfg(tmp_path), tmp_path / "run")
    assert result.outcome is Outcome.FAILED and ERROR_LOG not in result.message
    assert "its traceback could not be saved" in result.message
    assert not (tmp_path / "run" / ERROR_LOG).exists()


def test_an_interrupt_before_the_run_started_is_interrupted_with_no_status(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def run(spec: object, rd: RunDir, **kwargs: object) -> dict:
        raise KeyboardInterrupt

    monkeypatch.setattr(loop, "run", run)
    result = attempt(_cfg(tmp_path), tmp_path / "run")
    assert (result.outcome, result.status, result.signal) == (Outcome.INTERRUPTED, None, "SIGINT")
    assert not (tmp_path / "run" / "summary.json").exists()
