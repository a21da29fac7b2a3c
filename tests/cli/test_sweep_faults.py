"""Sweeps survive: a bad job does not stop the others, a killed sweep resumes, the report shows what failed."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
import yaml

from fedrun.cli import main as cli
from fedrun.cli import report as report_cli
from fedrun.config.schema import RunSpec
from fedrun.report.collect import load_runs
from fedrun.report.tables import make_table
from fedrun.run.job_dirs import job_dir_name
from fedrun.run.loop import run
from fedrun.run.sweep_index import find_jobs
from tests.conftest import compose_cfg
from tests.run.test_resume import SMALL, _kill_at_pause, _metrics, _start


def test_killed_sweep_resumes_and_a_bad_job_is_isolated_and_reported(
    tmp_path: Path, run_cli: Callable, make_spec: Callable[..., RunSpec], capsys: pytest.CaptureFixture
) -> None:
    sweep = tmp_path / "run"
    args = ["-m", *SMALL, "fl.lr=0.05,-1"]  # job 0 is fine, job 1 has a bad value
    cache = f"cache_dir={tmp_path / 'cache'}"
    # each job's directory is named by what varies and its config (fedrun/run/job_dirs.py): known before it starts
    good, bad = (
        sweep / job_dir_name(compose_cfg([*SMALL, lr, cache]), [lr], {"fl.lr"}) for lr in ("fl.lr=0.05", "fl.lr=-1")
    )
    proc = _start([*args, f"hydra.sweep.dir={sweep}", cache], tmp_path)
    _kill_at_pause(proc, tmp_path)  # in round 3 of job 0
    assert not bad.exists()  # the sweep died inside job 0

    res = run_cli(*args)  # the same sweep command, the same sweep dir
    assert res.returncode == 1, res.stderr  # one job failed
    listing = f"fedrun-report table {sweep} --rows fl.lr"  # the key the sweep varies: the command works pasted
    assert f"fedrun: 1 of 2 jobs failed (failed: 1); `{listing}` lists them" in res.stderr
    assert good.name.startswith("fl.lr=0.05-") and bad.name.startswith("fl.lr=-1-")
    assert "[2/2] " + bad.name + ": refused" in res.stdout
    assert "Traceback" not in res.stderr
    assert find_jobs(sweep, "fl.lr=0.05") == [good] and find_jobs(sweep, "fl.lr=-1") == [bad]
    job0 = json.loads((good / "summary.json").read_text())
    assert job0["status"] == "completed" and job0["resumed_from_round"] >= 1
    reference = tmp_path / "reference"
    reference.mkdir()
    run(make_spec(*SMALL, "fl.lr=0.05"), reference)
    pd.testing.assert_frame_equal(_metrics(good), _metrics(reference), check_exact=True)
    assert sorted(p.name for p in bad.iterdir()) == [".hydra", "error.txt"]
    assert "fl.lr: must be >= 0" in (bad / "error.txt").read_text()

    # a third pass skips the finished job (in-process: the same code path as inside the sweep)
    mtime = (good / "metrics.csv").stat().st_mtime_ns
    cli.execute(compose_cfg([*SMALL, "fl.lr=0.05", cache]), good, True, "job 0")
    assert "job 0: already completed; skipped" in capsys.readouterr().err
    assert (good / "metrics.csv").stat().st_mtime_ns == mtime

    for args in ([str(sweep), "--rows", "algorithm", "--cols", "fl.lr"], listing.split()[1:]):
        assert report_cli.main(args) == 0
        out = capsys.readouterr().out
        assert "1 of 2 runs did not complete" in out
        assert f"{bad}: refused: fl.lr: must be >= 0" in out


def _fake_run(d: Path, lr: float, seed: int, status: str, acc: float | None = None) -> None:
    d.mkdir(parents=True)
    cfg = {"algorithm": {"name": "fedavg"}, "fl": {"lr": lr}, "seed": seed}
    (d / "config.yaml").write_text(yaml.safe_dump(cfg))
    summary = {"status": status, "test_acc_last_k": acc}
    if status == "diverged":
        summary |= {"error": "diverged at round 4, client 2: non-finite local loss", "diverged_round": 4}
    (d / "summary.json").write_text(json.dumps(summary))


def test_report_shows_diverged_and_failed_cells_by_status_never_as_numbers(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    _fake_run(tmp_path / "a0", 0.05, 0, "completed", 0.80)
    _fake_run(tmp_path / "a1", 0.05, 1, "completed", 0.82)
    _fake_run(tmp_path / "b0", 5.0, 0, "completed", 0.10)
    _fake_run(tmp_path / "b1", 5.0, 1, "diverged", 0.12)  # its last accuracy must not leak into the table
    _fake_run(tmp_path / "c0", 9.0, 0, "running", 0.5)
    table, long = make_table(load_runs([tmp_path]), ["algorithm"], ["fl.lr"], "last_k")
    assert table.loc["algorithm=fedavg", "fl.lr=0.05"] == "81.00 ± 1.41"
    assert table.loc["algorithm=fedavg", "fl.lr=5.0"] == "diverged"
    assert table.loc["algorithm=fedavg", "fl.lr=9.0"] == "unfinished"
    assert long.set_index("fl.lr").loc[5.0, "completed"] == 1

    assert report_cli.main([str(tmp_path), "--cols", "fl.lr"]) == 0
    out = capsys.readouterr().out
    assert "2 of 5 runs did not complete" in out
    assert "b1: diverged: diverged at round 4, client 2" in out
