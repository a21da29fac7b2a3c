"""RunDir, the one reader and writer of a run directory: summary.json's format, typed readers, and the contract
(fedrun deletes only what it wrote in this attempt, only the run's own process writes its status, never a write
through a symlink leaving the directory, only fedrun's own temp files cleaned up)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fedrun.core.errors import ConfigError
from fedrun.run.checkpoint import check_run_dir, prior_status
from fedrun.run.experiment import earlier_engine_and_threads
from fedrun.run.recorder import run_log
from fedrun.storage.atomic import WriteError, atomic_write, remove_stale_temps
from fedrun.storage.lock import LOCK_FILE, run_dir_lock
from fedrun.storage.rundir import (
    HYDRA_DIR,
    LOG_FILE,
    SUMMARY_FORMAT,
    WRITTEN_IN_PLACE,
    RunDir,
    Summary,
    UnreadableRunFile,
)
from tests.conftest import dir_snapshot


def _dead_pid() -> int:
    return int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True).stdout)


def test_summary_is_written_with_its_format_and_read_back_typed(tmp_path: Path) -> None:
    rd = RunDir(tmp_path)
    rd.write_summary({"status": "completed", "engine": "sequential", "threads": 2, "test_acc_last_k": 0.5})
    assert json.loads((tmp_path / "summary.json").read_text())["format"] == SUMMARY_FORMAT == 1
    s = rd.read_summary()
    assert s is not None and s.format == 1 and "format" not in s.fields
    assert (s.status, s.engine, s.threads, s.test_acc("last_k"), s.test_acc("best")) == (
        "completed",
        "sequential",
        2,
        0.5,
        None,
    )


def test_a_legacy_summary_without_format_is_format_0_and_still_resumes_and_reports(tmp_path: Path) -> None:
    legacy = {"status": "interrupted", "engine": "vectorised", "threads": 3, "test_acc_final": 0.25}
    (tmp_path / "summary.json").write_text(json.dumps(legacy))  # as fedrun wrote it before the format field
    (tmp_path / "checkpoint.pt").write_bytes(b"x")
    s = RunDir(tmp_path).read_summary()
    assert s is not None and s.format == 0 and s.fields == legacy
    assert prior_status(tmp_path) == "interrupted"
    assert earlier_engine_and_threads(tmp_path) == ("vectorised", 3)  # what a resume keeps


def test_a_summary_of_a_newer_format_is_refused_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "summary.json").write_text(json.dumps({"status": "completed", "format": SUMMARY_FORMAT + 1}))
    with pytest.raises(UnreadableRunFile, match=r"^summary.json: format 2 is newer than this fedrun reads"):
        RunDir(tmp_path).read_summary()
    assert RunDir(tmp_path).status() is None


@pytest.mark.parametrize(
    ("text", "why"),
    [("{", "summary.json: Expecting"), ("[1]", "summary.json: not a fedrun summary"), ('{"status": 3}', "not a")],
)
def test_an_unreadable_summary_names_the_file_and_reads_as_no_status(tmp_path: Path, text: str, why: str) -> None:
    (tmp_path / "summary.json").write_text(text)
    with pytest.raises(UnreadableRunFile, match=why):
        RunDir(tmp_path).read_summary()
    assert RunDir(tmp_path).status() is None and prior_status(tmp_path) is None


def test_summary_parse_refuses_a_format_that_is_not_one() -> None:
    with pytest.raises(UnreadableRunFile, match="format 'x' is not a summary format"):
        Summary.parse('{"status": "completed", "format": "x"}')


@pytest.mark.parametrize(
    ("entries", "foreign"),
    [
        ([], False),  # empty: a fresh run's
        ([HYDRA_DIR], False),  # Hydra's record only: a job killed before fedrun wrote anything
        (["notes.txt"], True),
        (["notes.txt", HYDRA_DIR], True),
        (["notes.txt", "config.yaml"], False),  # a run (with something the user put beside it)
        (["error.txt", HYDRA_DIR], False),  # a refused run
    ],
)
def test_a_directory_with_files_and_no_fedrun_run_is_foreign(tmp_path: Path, entries: list[str], foreign: bool) -> None:
    for name in entries:
        (tmp_path / name).mkdir() if name == HYDRA_DIR else (tmp_path / name).write_text("x")
    assert RunDir(tmp_path).foreign() is foreign


def test_refusing_a_foreign_directory_removes_only_what_this_attempt_wrote(tmp_path: Path) -> None:
    run = tmp_path / "mine"
    (run / "sub").mkdir(parents=True)
    (run / "notes.txt").write_text("keep me")
    (run / "sub" / "data.bin").write_bytes(b"\0\1")
    before = dir_snapshot(run)
    (run / HYDRA_DIR).mkdir()  # Hydra's record of this attempt, written before the attempt begins
    (run / HYDRA_DIR / "config.yaml").write_text("seed: 0\n")
    rd = RunDir(run, record=HYDRA_DIR)
    assert rd.foreign()
    rd.refuse("hydra.run.dir: not a run")
    assert dir_snapshot(run) == before  # byte for byte: no error.txt, no .hydra


def test_refusing_a_fresh_run_keeps_hydras_record_and_says_why(tmp_path: Path) -> None:
    run = tmp_path / "fresh"
    (run / HYDRA_DIR).mkdir(parents=True)  # Hydra's record of this attempt, which made the directory
    rd = RunDir(run, record=HYDRA_DIR)
    with rd.lock():  # the lock file is this attempt's
        rd.refuse("fl.clients: must be >= 1")
    assert sorted(p.name for p in run.iterdir()) == [HYDRA_DIR, "error.txt"]
    assert (run / "error.txt").read_text() == "fl.clients: must be >= 1\n"


def test_refusing_in_an_earlier_runs_directory_leaves_it_as_it_was(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("seed: 0\n")
    (run / "summary.json").write_text('{"status": "completed"}')
    before = dir_snapshot(run)
    rd = RunDir(run)
    with rd.lock():
        (run / "partition.csv").write_text("new")  # written by this attempt before it was refused
        rd.refuse("resume: bad input")
    assert dir_snapshot(run) == before


def test_only_the_process_that_started_the_run_writes_its_status(tmp_path: Path) -> None:
    (tmp_path / "summary.json").write_text(json.dumps({"status": "completed", "test_acc_final": 0.9}))
    before = (tmp_path / "summary.json").read_bytes()
    later = RunDir(tmp_path)  # a later command that failed before it started the run
    later.set_status("failed", "KeyError: 'name'")
    later.set_status("interrupted", "interrupted by SIGINT", only_running=True)
    assert (tmp_path / "summary.json").read_bytes() == before
    owner = RunDir(tmp_path)
    owner.start("seed: 0\n")
    owner.set_status("failed", "boom")
    s = owner.read_summary()
    assert s is not None and (s.status, s.fields["error"], s.fields["test_acc_final"]) == ("failed", "boom", 0.9)


@pytest.mark.parametrize("name", WRITTEN_IN_PLACE)
def test_a_symlink_leaving_the_run_dir_is_refused(tmp_path: Path, name: str) -> None:
    run, outside = tmp_path / "run", tmp_path / "outside"
    run.mkdir()
    outside.mkdir()
    (run / name).symlink_to(outside if name == HYDRA_DIR else outside / "target")
    with pytest.raises(ConfigError, match=rf"^hydra.run.dir: {run / name} is a symlink to .*outside the run dir"):
        RunDir(run).check_links()
    (run / name).unlink()
    (run / "inside").mkdir()
    (run / name).symlink_to(run / "inside")  # a link that stays inside is the user's business
    RunDir(run).check_links()


def test_the_lock_and_the_log_are_never_taken_through_a_symlink(tmp_path: Path) -> None:
    run, target = tmp_path / "run", tmp_path / "target"
    run.mkdir()
    target.write_text("theirs")
    (run / LOCK_FILE).symlink_to(target)
    with pytest.raises(WriteError, match="symlink"), run_dir_lock(run):
        pass
    (run / LOCK_FILE).unlink()
    (run / LOG_FILE).symlink_to(target)
    with pytest.raises(WriteError, match="symlink"), run_log(run):
        pass
    assert target.read_text() == "theirs"


def test_atomic_writes_replace_a_symlink_never_write_through_it(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_text("theirs")
    (tmp_path / "summary.json").symlink_to(target)
    RunDir(tmp_path).write_summary({"status": "running"})
    assert target.read_text() == "theirs" and not (tmp_path / "summary.json").is_symlink()


def test_only_fedruns_own_temp_files_are_cleaned_up(tmp_path: Path) -> None:
    dead = _dead_pid()
    theirs = [f"name.{dead}.tmp", f"fmnist-iid.npz.{dead}.tmp.npz", f"x.{dead}.tmp.json", ".tmp", f".{dead}.tmp"]
    ours = [f".metrics.csv.{dead}.tmp", f".fmnist-iid.npz.{dead}.tmp.npz"]
    for name in theirs + ours:
        (tmp_path / name).write_text("x")
    (tmp_path / f".summary.json.{dead}.tmp.link").symlink_to(tmp_path / f"name.{dead}.tmp")
    removed = remove_stale_temps(tmp_path, any_pid=True)
    assert sorted(p.name for p in removed) == sorted(ours)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*theirs, f".summary.json.{dead}.tmp.link"])


def test_check_run_dir_reads_through_rundir(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text("seed: 0\nfl:\n  rounds: 2\n")
    atomic_write(tmp_path / "summary.json", '{"status": "completed"}')  # a legacy summary: format 0
    assert check_run_dir(RunDir(tmp_path), {"seed": 0, "fl": {"rounds": 2}}) == "completed"
    assert check_run_dir(tmp_path, {"seed": 0, "fl": {"rounds": 2}}) == "completed"
