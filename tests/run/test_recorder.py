"""Runs you can watch: fedrun.log holds the start, one line per evaluated round and the summary; a multirun job
prints the same lines to stderr with its label; a resumed run appends to the log."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from fedrun.cli import main as cli
from tests.conftest import compose_cfg
from tests.run.test_resume import SMALL

ROUND = re.compile(r"round (\d+)/8: test_acc 0\.\d{4}, test_loss \d+\.\d{4}, local_loss \d+\.\d{4}, \d+\.\d s$")


def _log(run_dir: Path) -> list[str]:
    return (run_dir / "fedrun.log").read_text().splitlines()


def test_fedrun_log_has_a_line_per_evaluated_round_and_the_summary(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    cli.execute(compose_cfg([*SMALL, "eval.every=3", f"cache_dir={tmp_path / 'cache'}"]), run_dir, multirun=False)
    lines = _log(run_dir)
    assert (
        "INFO started: 8 rounds: fedavg on fmnist (mlp, dirichlet), seed 0; engine vectorised, 1 thread(s)" in lines[0]
    )
    assert [int(ROUND.search(ln).group(1)) for ln in lines[1:-1]] == [3, 6, 8]
    assert re.search(r"INFO completed: 8 rounds, final test_acc \d+\.\d\d%, mean of last 3 .*, best .* s$", lines[-1])
    assert len(lines) == 5


def test_a_multirun_job_prints_its_rounds_with_its_label_and_a_resume_appends(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fedrun.run.state as run_state

    run_dir = tmp_path / "run"
    cfg = compose_cfg([*SMALL, f"cache_dir={tmp_path / 'cache'}"])
    save: Callable = run_state.save_checkpoint

    def killed_after_round_5(path: Path, ck) -> None:  # noqa: ANN001
        save(path, ck)
        if ck.round == 5:
            raise SystemExit(137)  # stands for a kill (no summary, no log line of the end)

    monkeypatch.setattr(run_state, "save_checkpoint", killed_after_round_5)
    with pytest.raises(SystemExit):
        cli.execute(cfg, run_dir, multirun=True, label="job 2 [seed=0]")
    monkeypatch.undo()
    err = capsys.readouterr().err.splitlines()
    assert [ln for ln in err if ROUND.search(ln)] == [ln for ln in err if ln.startswith("job 2 [seed=0]: round ")]
    assert len([ln for ln in err if ROUND.search(ln)]) == 5
    cli.execute(cfg, run_dir, multirun=True, label="job 2 [seed=0]")  # the sweep re-run: the job resumes
    lines = _log(run_dir)
    assert "resumed after round 5 of 8" in lines[6]  # after the start and 5 rounds
    assert [int(ROUND.search(ln).group(1)) for ln in lines if ROUND.search(ln)] == [1, 2, 3, 4, 5, 6, 7, 8]
    assert "INFO completed: 8 rounds" in lines[-1]
    assert "job 2 [seed=0]: completed: 8 rounds" in capsys.readouterr().err


def test_the_hydra_entry_point_writes_fedrun_log_once(run_cli: Callable, tmp_path: Path) -> None:
    res = run_cli(*SMALL, "fl.rounds=2")
    assert res.returncode == 0, res.stderr
    lines = _log(tmp_path / "run")
    assert len(lines) == 4 and "round 2/2" in lines[2] and "completed: 2 rounds" in lines[3]


def test_the_last_k_mean_of_one_round_is_called_the_last_round() -> None:
    from fedrun.run.summary import last_k_words, summary_line

    assert last_k_words(1) == "last round" and last_k_words(10) == "mean of last 10 rounds"
    line = summary_line({"status": "completed", "rounds_completed": 3, "last_k": 1, "test_acc_last_k": 0.5})
    assert "last 1" not in line and "last round 50.00%" in line
