"""Signals end a run like Ctrl-C: status interrupted, last checkpoint kept, exit 128 + signum, one line; a sweep
stops (the KeyboardInterrupt is re-raised after the summary); a second signal exits at once in one line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from fedrun.cli import main as cli
from fedrun.config.schema import RunSpec
from fedrun.engines.sequential import SequentialEngine
from fedrun.host.interrupts import Interrupted, interrupts
from fedrun.run.checkpoint import CHECKPOINT_FILE, load_checkpoint
from fedrun.run.loop import run
from tests.conftest import REPO, compose_cfg
from tests.run.test_resume import SMALL, _metrics, _summary

LONGER = [*SMALL, "fl.rounds=40"]  # long enough that a signal sent after the first checkpoint lands mid-run


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_mid_run_ends_it_as_interrupted_and_a_rerun_resumes_exactly(
    tmp_path: Path, make_spec: Callable[..., RunSpec], sig: signal.Signals
) -> None:
    run_dir = tmp_path / "run"
    args = [*LONGER, f"hydra.run.dir={run_dir}", f"cache_dir={tmp_path / 'cache'}"]
    err = tmp_path / "stderr.txt"
    proc = _popen(args, tmp_path, err)
    deadline = time.monotonic() + 300
    while not (run_dir / CHECKPOINT_FILE).is_file():
        assert proc.poll() is None and time.monotonic() < deadline, "no checkpoint appeared"
        time.sleep(0.01)
    proc.send_signal(sig)
    assert proc.wait(timeout=120) == 128 + sig
    lines = err.read_text().strip().splitlines()
    assert "Traceback" not in err.read_text()
    assert lines[-1].startswith(f"fedrun: {run_dir}: interrupted by {sig.name}; re-run the same command to resume")
    s = _summary(run_dir)
    assert s["status"] == "interrupted" and s["signal"] == sig.name and s["rounds_completed"] < 40
    at = load_checkpoint(run_dir / CHECKPOINT_FILE).round
    assert 1 <= at < 40

    cli.resume(run_dir, [])
    assert _summary(run_dir)["status"] == "completed" and _summary(run_dir)["resumed_from_round"] == at
    reference = tmp_path / "reference"
    reference.mkdir()
    run(make_spec(*LONGER), reference)
    pd.testing.assert_frame_equal(_metrics(run_dir), _metrics(reference), check_exact=True)


def _popen(args: list[str], tmp_path: Path, stderr: Path) -> subprocess.Popen:
    """``python -m fedrun.cli.main ARGS`` in a subprocess, its stderr to the file ``stderr``."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with stderr.open("w") as f:
        cmd = [sys.executable, "-m", "fedrun.cli", *args]
        return subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=f)


def test_ctrl_c_during_start_up_is_one_line(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    args = [*SMALL, f"hydra.run.dir={run_dir}", f"cache_dir={tmp_path / 'cache'}"]
    err = tmp_path / "stderr.txt"
    proc = _popen(args, tmp_path, err)
    deadline = time.monotonic() + 300
    while not (run_dir / "config.yaml").is_file():  # execute() has started: data and model are being built
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.002)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=120) == 130
    text = err.read_text()
    assert "Traceback" not in text
    assert text.strip().splitlines()[-1].startswith(f"fedrun: {run_dir}: interrupted by SIGINT; ")


def test_a_second_signal_exits_at_once_with_one_line(capsys: pytest.CaptureFixture) -> None:
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    with pytest.raises(SystemExit) as e, interrupts("job 3"):
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        except Interrupted as first:
            assert first.signum == signal.SIGINT
            os.kill(os.getpid(), signal.SIGTERM)  # while finishing up
            time.sleep(5)
    assert e.value.code == 128 + signal.SIGTERM
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("fedrun: job 3: SIGTERM again: stopping now")
    assert {s: signal.getsignal(s) for s in before} == before  # the handlers are given back


class _InterruptedInRound3(SequentialEngine):
    def train_cohort(self, rnd, params, extras, clients, states, lr):  # noqa: ANN001, ANN201
        if rnd == 2:
            raise Interrupted(signal.SIGTERM)
        return super().train_cohort(rnd, params, extras, clients, states, lr)


@pytest.mark.parametrize("multirun", [False, True])
def test_an_interrupt_writes_the_summary_then_exits_or_stops_the_sweep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, multirun: bool
) -> None:
    monkeypatch.setattr("fedrun.run.experiment.select_engine", lambda spec, pinned=None: _InterruptedInRound3)
    run_dir = tmp_path / "run"
    cfg = compose_cfg([*SMALL, "hardware.engine=sequential", f"cache_dir={tmp_path / 'cache'}"])
    with pytest.raises(KeyboardInterrupt if multirun else SystemExit) as e:
        cli.execute(cfg, run_dir, multirun=multirun, label="job 0 [x=1]" if multirun else "")
    if multirun:
        assert isinstance(e.value, Interrupted) and e.value.signum == signal.SIGTERM  # for fedrun.cli.main.main
    else:
        assert e.value.code == 128 + signal.SIGTERM
    s = json.loads((run_dir / "summary.json").read_text())
    assert s["status"] == "interrupted" and s["error"] == "interrupted by SIGTERM" and s["rounds_completed"] == 2
    assert load_checkpoint(run_dir / CHECKPOINT_FILE).round == 2
    assert "interrupted by SIGTERM; re-run the same command to resume" in capsys.readouterr().err
