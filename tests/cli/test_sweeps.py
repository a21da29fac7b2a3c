"""Sweeps that can grow (job directories named by what varies, keyed by config), that show themselves while they
run (their directory, a live table or one line per job), and that stop on Ctrl-C."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from fedrun.cli import sweeps
from fedrun.cli.sweeps import varying_keys
from fedrun.report.collect import load_runs
from fedrun.report.sweep_console import SweepConsole
from fedrun.run.job_dirs import job_dir_name
from fedrun.run.recorder import ROW_RECORD
from fedrun.run.sweep_index import find_jobs, read_index
from tests.conftest import REPO, compose_cfg, main_exit_code
from tests.dispositions import foreground
from tests.pause_worker import PAUSED

TINY = [
    "experiment=smoke",
    "data.max_train_samples=300",
    "data.max_test_samples=100",
    "fl.clients=3",
    "fl.rounds=1",
    "model.hidden=[16]",
    "hardware.engine=sequential",
    "hardware.threads=1",
    "output.plots=false",
    "checkpoint.every=0",
]


def test_varying_keys_are_the_swept_ones_in_command_order() -> None:
    line = ["algorithm=fedavg,fedprox", "fl.rounds=2", "model.hidden=[16,16]", "seed=range(3)", "++tags.m='a,b'"]
    assert varying_keys(line) == ["algorithm", "seed"]
    assert varying_keys(["seed=0"], {"fl.lr": "tag(log, interval(1e-4, 1))", "fl.mu": "0.1"}) == ["fl.lr"]


def _default_run_name(overrides: list[str]) -> str:
    """The folder a single run of ``overrides`` gets by default (``hydra.run.dir``), less its time of day."""
    from hydra import compose
    from hydra.core.global_hydra import GlobalHydra
    from hydra.initialize import initialize_config_dir
    from omegaconf import OmegaConf

    from fedrun.cli.main import CONF_DIR

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
            cfg = compose(config_name="config", overrides=overrides, return_hydra_config=True)
            return Path(str(OmegaConf.select(cfg, "hydra.run.dir"))).name[len("HH-MM-SS-") :]
    finally:
        GlobalHydra.instance().clear()


def test_runs_started_in_the_same_second_get_a_folder_per_config() -> None:
    """``fedrun seed=0 & fedrun seed=1 &`` start in the same second: each config's default folder ends with its key
    (as a sweep's job folder does), so they no longer share one (the second was refused: the folder in use); the
    same config gets the same folder (where it resumes, or is skipped when finished)."""
    seed0, seed1 = _default_run_name(["seed=0"]), _default_run_name(["seed=1"])
    assert re.fullmatch(r"fedavg-fmnist-[0-9a-f]{8}", seed0) and seed0 != seed1
    assert _default_run_name(["seed=0"]) == seed0
    assert _default_run_name(["seed=0", "output.plots=false"]) == seed0  # not part of what decides the results
    assert re.fullmatch(r"fedavg-fmnist-system-[0-9a-f]{8}", _default_run_name(["system=dropout"]))


def test_a_sweep_grows_by_its_new_jobs_only_and_the_report_sees_each_config_once(
    run_cli: Callable, tmp_path: Path
) -> None:
    """seed=0 -> seed=0,1 under two methods: with job-number directories the second command met other configs
    in jobs 1 and 2 (refused) and ran FedProx seed 0 again; keyed by config, it runs only the two new jobs."""
    sweep = tmp_path / "run"
    first = run_cli("-m", *TINY, "algorithm=fedavg,fedprox", "seed=0")
    assert first.returncode == 0, first.stderr
    done = {p: (p / "metrics.csv").stat().st_mtime_ns for p in find_jobs(sweep, "seed=0")}
    assert len(done) == 2

    second = run_cli("-m", *TINY, "algorithm=fedavg,fedprox", "seed=0,1")
    assert second.returncode == 0, second.stderr
    assert second.stdout.count("skipped (already done") == 2
    assert {p: (p / "metrics.csv").stat().st_mtime_ns for p in done} == done  # reused, not rerun
    jobs = [p for p in sweep.iterdir() if p.is_dir()]
    assert len(jobs) == 4 and sorted(p.name for p in jobs) == sorted(read_index(sweep))
    # the first command varied the method only, the second also the seed: the old folders keep their names
    assert sorted(p.name.rsplit("-", 1)[0] for p in jobs) == [
        "algorithm=fedavg",
        "algorithm=fedavg,seed=1",
        "algorithm=fedprox",
        "algorithm=fedprox,seed=1",
    ]
    for p in jobs:
        assert json.loads((p / "summary.json").read_text())["status"] == "completed"
    runs = load_runs([sweep])
    assert len(runs) == 4 and runs.groupby(["algorithm", "seed"]).size().tolist() == [1, 1, 1, 1]


def test_ctrl_c_stops_a_sweep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """Ctrl-C in job 0 ends the sweep (exit 130, one line); before, the next job started and the sweep exited 0."""
    sweep = tmp_path / "sweep"
    long = [*TINY, "fl.rounds=6", "checkpoint.every=1"]  # job 0 pauses in round 2 until the signal (pause_worker)
    job0 = sweep / job_dir_name(compose_cfg([*long, "seed=0"]), ["seed=0"], {"seed"})
    cmd = [sys.executable, "-m", "tests.pause_worker", "round:2", "-m", *long, "seed=0,1", f"hydra.sweep.dir={sweep}"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([*cmd, f"cache_dir={tmp_path / 'cache'}"], cwd=tmp_path, env=env, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=foreground)  # fmt: skip
    deadline = time.monotonic() + 600  # a bound, not a timing: job 0 waits in round 2 for the signal
    while not (tmp_path / PAUSED).exists():
        assert proc.poll() is None and time.monotonic() < deadline, "job 0 did not reach round 2"
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 130, err
    line = err.strip().splitlines()[-1]
    assert line.startswith(f"fedrun: stopped by SIGINT in job 0 [{job0.name}]; resume the sweep with: fedrun "), err
    assert "Traceback" not in err
    assert json.loads((job0 / "summary.json").read_text())["status"] == "interrupted"
    assert list(read_index(sweep)) == [job0.name]  # job 1 never started
    # the printed command, pasted in another folder, finishes the sweep: job 0 resumed, job 1 run (in this process:
    # the stop above was the process's part)
    pasted = shlex.split(line.split("resume the sweep with: ", 1)[1])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert main_exit_code(monkeypatch, pasted) == 0
    done = capsys.readouterr()
    assert "resuming after round" in done.out + done.err
    assert (
        sorted(read_index(sweep)) == sorted(p.name for p in sweep.iterdir() if p.is_dir())
        and len(read_index(sweep)) == 2
    )
    assert {json.loads((sweep / j / "summary.json").read_text())["status"] for j in read_index(sweep)} == {"completed"}


def _sweep(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *args: str) -> object:
    where = [f"hydra.sweep.dir={tmp_path / 'sweep'}", f"cache_dir={tmp_path / 'cache'}"]
    return main_exit_code(monkeypatch, ["fedrun", "-m", *TINY, *args, *where])


def test_a_sweep_prints_its_dir_and_one_line_per_job_start_and_end_off_a_terminal(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Before: Hydra's '#0 : <every override>' lines, three log lines per job and round on stderr, each with every
    override, and neither the sweep's directory nor how to make its table."""
    monkeypatch.chdir(tmp_path)
    assert _sweep(monkeypatch, tmp_path, "algorithm=fedavg,fedprox", "seed=0,1") == 0
    out, err = capsys.readouterr()
    sweep = tmp_path / "sweep"
    names = [f"algorithm={a},seed={s}" for a in ("fedavg", "fedprox") for s in (0, 1)]
    folders = {p.name.rsplit("-", 1)[0]: p.name for p in sweep.iterdir() if p.is_dir()}
    assert sorted(folders) == names
    lines = out.splitlines()
    assert lines[0] == f"sweep of 4 jobs in {sweep}"
    for n, name in enumerate(names, 1):
        assert lines[2 * n - 1] == f"[{n}/4] {folders[name]}: started"
        assert re.fullmatch(
            rf"\[{n}/4\] {re.escape(folders[name])}: completed, acc \d+\.\d\d% \(\d+\.\d s\)", lines[2 * n]
        )
    assert lines[9] == f"sweep done (4 completed): {sweep}; its table: fedrun-report table {sweep}"
    assert len(lines) == 10 and err == ""

    # grown by a seed: the four are skipped (found by their hash), the two new ones run
    assert _sweep(monkeypatch, tmp_path, "algorithm=fedavg,fedprox", "seed=0,1,2") == 0
    out, err = capsys.readouterr()
    assert out.count("skipped (already done, acc ") == 4 and out.count(": started") == 2 and err == ""
    assert "sweep done (2 completed, 4 skipped)" in out
    assert len([p for p in sweep.iterdir() if p.is_dir()]) == 6


def test_the_live_table_follows_the_jobs_on_a_terminal(tmp_path: Path) -> None:
    """On a terminal the jobs are a live table: each job's status, round, accuracy so far; at the end the line."""
    from rich.console import Console

    buf = io.StringIO()
    term = Console(file=buf, force_terminal=True, force_interactive=True, width=120, color_system=None)
    console = SweepConsole("outputs/multirun/x", total=2, console=term)
    done, running = tmp_path / "a-1", tmp_path / "b-2"
    done.mkdir()
    (done / "summary.json").write_text(
        json.dumps({"status": "completed", "test_acc_last_k": 0.5, "rounds_completed": 3})
    )
    running.mkdir()
    log = logging.getLogger("fedrun")
    level = log.level
    log.setLevel(logging.INFO)  # as a job's run_log sets it (fedrun/run/recorder.py); not left to an earlier test
    with sweeps.watching(console):
        assert sweeps.reporting() and sweeps.round_echo("job 0") is None
        first = console.job_started(0, "seed=0-1", 3, tmp_path / "new-0")
        log.info("round 2/3", extra={ROW_RECORD: {"round": 2, "test_acc": 0.4}})
        table = _render(console)
        assert re.search(r"│ 1 │ seed=0-1 +│ running +│ +2/3 │ +40\.00% │", table), table
        assert "0 done (0 failed), 1 running, 1 queued" in table
        console.job_ended(first, done)
        assert re.search(r"│ 1 │ seed=0-1 +│ completed +│ +3/3 │ +50\.00% │", _render(console))
        console.finish()
    log.setLevel(level)
    assert not sweeps.reporting() and sweeps.round_echo("job 0") == "job 0"
    shown = buf.getvalue()
    assert "completed" in shown and shown.rstrip().endswith(
        "sweep done (1 completed): outputs/multirun/x; its table: fedrun-report table outputs/multirun/x"
    )


def _render(console: SweepConsole) -> str:
    from rich.console import Console

    out = Console(file=io.StringIO(), width=120, color_system=None)
    out.print(console.table())
    return out.file.getvalue()  # type: ignore[attr-defined]


def test_a_config_cannot_point_fedruns_callback_at_other_code(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    code = _sweep(monkeypatch, tmp_path, "seed=0,1", "hydra.callbacks.fedrun_sweep._target_=builtins.print")
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("fedrun: error: hydra.callbacks.fedrun_sweep: refused") and err.count("\n") == 1


def test_the_readme_sweeps_table_command_works_when_pasted(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """The README's first sweep varies two keys besides the seed: the command its last line prints puts them in the
    rows and the columns, and exits 0 when pasted. Before: ``fedrun-report table <dir>`` (rows: algorithm), which
    refuses cells that mix partition.alpha 0.1 and 1.0 (exit 2)."""
    from fedrun.cli import report

    (line,) = [ln for ln in (REPO / "README.md").read_text().splitlines() if ln.startswith("fedrun -m experiment=")]
    readme = [a for a in shlex.split(line)[2:] if not a.startswith("hydra.sweep.dir=")]
    given = {a.split("=", 1)[0] for a in readme}
    small = [a for a in TINY if a.split("=", 1)[0] not in given]
    sweep = tmp_path / "first sweep"
    monkeypatch.chdir(tmp_path)
    argv = ["fedrun", "-m", *readme, *small, f"hydra.sweep.dir='{sweep}'", f"cache_dir={tmp_path / 'cache'}"]
    assert main_exit_code(monkeypatch, argv) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith(f"sweep done (8 completed): {sweep}; its table: ")
    pasted = last.split("; its table: ", 1)[1]
    assert pasted == f"fedrun-report table '{sweep}' --rows algorithm --cols partition.alpha"
    args = shlex.split(pasted)
    assert args[0] == "fedrun-report" and report.main(args[1:]) == 0
    out = capsys.readouterr().out
    assert "| algorithm=fedavg " in out and "partition.alpha=1.0" in out
