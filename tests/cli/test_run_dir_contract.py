"""The run-directory contract, at the command line (``python -m fedrun.cli`` in a subprocess):

- fedrun deletes only files it wrote in this attempt: a run dir that is not empty and holds no fedrun run is
  refused in one line (exit 2) and left byte for byte as it was;
- only the process that started or resumed a run writes its status: a later command that fails before that point
  is bad input (exit 2, the directory untouched), so it cannot flip ``completed`` to ``failed``;
- ``.`` (or an ancestor of the current directory) as the run or sweep dir, and ``hydra.sweep.subdir`` /
  ``hydra.output_subdir`` leaving their folder, are refused; fedrun never writes through a symlink leaving the run
  dir (``.hydra/``, ``fedrun.log``, ``.fedrun.lock``); only fedrun's own temp files (``.<name>.<pid>.tmp``) are
  ever cleaned up.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import forkserver
from tests.conftest import REPO, dir_snapshot
from tests.run.test_resume import SMALL

ONE_ROUND = [*SMALL, "fl.rounds=1", "output.plots=false", "output.quiet=true"]


SERVER: dict[str, str | None] = {"sock": None}


@pytest.fixture(scope="module", autouse=True)
def _fork_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Each ``python -m fedrun.cli`` below is a process of its own, forked from one that imported fedrun, torch and
    Hydra once (tests/forkserver.py), not a fresh interpreter that imports them again (seconds each)."""
    base = tmp_path_factory.mktemp("forkserver")
    with forkserver.started({**os.environ, "PYTHONPATH": str(REPO)}, base, base / "log") as sock:
        SERVER["sock"] = sock
        yield
        SERVER["sock"] = None


def _fedrun(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    forked = forkserver.forked_run(SERVER["sock"], "fedrun.cli", list(args), cwd, env, timeout=300)
    return forked or subprocess.run(
        [sys.executable, "-m", "fedrun.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def _one_line_exit_2(res: subprocess.CompletedProcess, start: str) -> None:
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip().count("\n") == 0 and "Traceback" not in res.stderr, res.stderr
    assert res.stderr.startswith(f"fedrun: error: {start}"), res.stderr


def _folder_of_files(folder: Path) -> Path:
    (folder / "sub").mkdir(parents=True)
    (folder / "thesis.tex").write_text("\\section{Results}\n")
    (folder / "sub" / "data.bin").write_bytes(bytes(range(256)))
    (folder / "sub" / "name.123.tmp").write_text("a user's file that looks like a temp file")
    return folder


@pytest.fixture(scope="module")
def completed_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A completed one-round run (shared: copied by each test that changes it)."""
    base = tmp_path_factory.mktemp("completed")
    res = _fedrun(base, *ONE_ROUND, f"hydra.run.dir={base / 'run'}", f"cache_dir={base / 'cache'}")
    assert res.returncode == 0, res.stderr
    return base / "run"


@pytest.mark.parametrize("bad", [["fl.clients=0"], []])
def test_a_folder_of_files_is_refused_in_one_line_and_left_byte_for_byte(tmp_path: Path, bad: list[str]) -> None:
    """Bad input or not, a non-empty folder holding no fedrun run is never written (before: emptied on bad input)."""
    folder = _folder_of_files(tmp_path / "mine")
    before = dir_snapshot(folder)
    res = _fedrun(tmp_path, *ONE_ROUND, *bad, f"hydra.run.dir={folder}", f"cache_dir={tmp_path / 'cache'}")
    _one_line_exit_2(res, f"hydra.run.dir: {folder} is not empty and holds no fedrun run")
    assert dir_snapshot(folder) == before


@pytest.mark.parametrize("where", [".", "..", "work/sub/..", "<cwd>", "<parent>"])
def test_the_current_directory_or_an_ancestor_is_refused_as_run_dir(tmp_path: Path, where: str) -> None:
    cwd = _folder_of_files(tmp_path / "work")
    where = where.replace("<cwd>", str(cwd)).replace("<parent>", str(tmp_path)).replace("work/sub/..", "sub/..")
    before = dir_snapshot(tmp_path)
    res = _fedrun(cwd, *ONE_ROUND, "fl.clients=0", f"hydra.run.dir={where}", f"cache_dir={tmp_path / 'cache'}")
    _one_line_exit_2(res, "hydra.run.dir: ")
    assert "is the current directory or one above it" in res.stderr
    assert dir_snapshot(tmp_path) == before


def test_the_current_directory_is_refused_as_sweep_dir(tmp_path: Path) -> None:
    cwd = _folder_of_files(tmp_path / "work")
    before = dir_snapshot(tmp_path)
    res = _fedrun(cwd, "-m", *ONE_ROUND, "seed=0,1", "hydra.sweep.dir=.", f"cache_dir={tmp_path / 'cache'}")
    _one_line_exit_2(res, "hydra.sweep.dir: '.' is the current directory or one above it")
    assert dir_snapshot(tmp_path) == before


@pytest.mark.parametrize(
    ("override", "multirun"),
    [
        ("hydra.sweep.subdir=../x", True),
        ("hydra.sweep.subdir=<abs>", True),
        ("hydra.output_subdir=../x", False),
        ("hydra.output_subdir=<abs>", False),
        ("hydra.output_subdir=sub/../../x", False),
    ],
)
def test_subdirs_that_leave_their_folder_are_refused(tmp_path: Path, override: str, multirun: bool) -> None:
    key = override.split("=")[0]
    override = override.replace("<abs>", str(tmp_path / "x"))
    where = [f"hydra.sweep.dir={tmp_path / 'sweep'}"] if multirun else [f"hydra.run.dir={tmp_path / 'run'}"]
    res = _fedrun(tmp_path, *(["-m"] if multirun else []), *ONE_ROUND, *where, f"cache_dir={tmp_path / 'c'}", override)
    _one_line_exit_2(res, f"{key}: ")
    assert "is not a folder below its directory" in res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing written anywhere, x included


@pytest.mark.parametrize("name", [".hydra", "fedrun.log", ".fedrun.lock"])
def test_a_symlink_leaving_the_run_dir_is_never_written_through(tmp_path: Path, completed_run: Path, name: str) -> None:
    run, outside = tmp_path / "run", tmp_path / "outside"
    shutil.copytree(completed_run, run, symlinks=True)
    outside.mkdir()
    (outside / "target").write_text("theirs")
    if (run / name).is_dir():
        shutil.rmtree(run / name)
    else:
        (run / name).unlink(missing_ok=True)
    (run / name).symlink_to(outside if name == ".hydra" else outside / "target")
    before, before_out = dir_snapshot(run), dir_snapshot(outside)
    res = _fedrun(tmp_path, *ONE_ROUND, "fl.rounds=2", f"hydra.run.dir={run}", f"cache_dir={tmp_path / 'cache'}")
    _one_line_exit_2(res, "hydra.run.dir: ")
    assert f"{run / name} is a symlink to" in res.stderr
    assert dir_snapshot(outside) == before_out and dir_snapshot(run) == before


@pytest.mark.parametrize(
    "overrides",
    [["algorithm=fedprox"], ["model=cnn"], ["partition=iid"], ["data=cifar10"], ["fl=5"], ["fl.rounds=0"], ["seed=3"]],
)
@pytest.mark.parametrize("how", ["resume", "run-dir"])
def test_a_later_command_cannot_flip_a_completed_run_to_failed(
    tmp_path: Path, completed_run: Path, overrides: list[str], how: str
) -> None:
    """``run-dir``: Hydra writes its record of the job (.hydra/) before fedrun sees the run there; refused, the
    run's own record is put back."""
    run = tmp_path / "run"
    shutil.copytree(completed_run, run, symlinks=True)
    before = dir_snapshot(run)
    assert b'"status": "completed"' in before["summary.json"]  # type: ignore[operator]
    where = [f"resume={run}"] if how == "resume" else [*ONE_ROUND, f"hydra.run.dir={run}", f"cache_dir={tmp_path}/c"]
    res = _fedrun(tmp_path, *where, *overrides)
    _one_line_exit_2(res, "")
    assert dir_snapshot(run) == before  # status, config, metrics, log, Hydra's record: byte for byte


def test_a_completed_run_is_skipped_and_its_summary_reads_back(tmp_path: Path, completed_run: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(completed_run, run, symlinks=True)
    before = dir_snapshot(run)
    res = _fedrun(tmp_path, f"resume={run}")
    assert res.returncode == 0 and "already completed; skipped" in res.stderr, res.stderr
    assert {k: v for k, v in dir_snapshot(run).items() if k != "fedrun.log"} == {
        k: v for k, v in before.items() if k != "fedrun.log"
    }


def test_only_fedruns_own_temp_files_are_cleaned_up_at_start(tmp_path: Path) -> None:
    dead = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True).stdout)
    run, cache = tmp_path / "run", tmp_path / "cache"
    run.mkdir()
    cache.mkdir()
    (run / "error.txt").write_text("fl.clients: must be >= 1\n")  # a refused run: fedrun's directory
    theirs = {run / f"name.{dead}.tmp", cache / f"name.{dead}.tmp", cache / f"data.npz.{dead}.tmp.npz"}
    ours = {run / f".metrics.csv.{dead}.tmp", cache / f".engine-auto.json.{dead}.tmp"}
    for f in theirs | ours:
        f.write_text("x")
    res = _fedrun(tmp_path, *ONE_ROUND, f"hydra.run.dir={run}", f"cache_dir={cache}")
    assert res.returncode == 0, res.stderr
    assert all(f.read_text() == "x" for f in theirs)
    assert not any(f.exists() for f in ours)


def test_a_sweep_subdir_that_resolves_outside_the_sweep_dir_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env_dir = "FEDRUN_TEST_SUBDIR"
    monkeypatch.setenv(env_dir, "../escaped")  # the fork server, started without it, declines: a fresh interpreter
    res = _fedrun(
        tmp_path, "-m", *ONE_ROUND, f"hydra.sweep.dir={tmp_path / 'sweep'}",
        f"hydra.sweep.subdir=${{oc.env:{env_dir}}}", f"cache_dir={tmp_path / 'c'}",
    )  # fmt: skip
    _one_line_exit_2(res, "hydra.sweep.subdir: '../escaped' is not a folder below its directory")
    assert not (tmp_path / "escaped").exists()


@pytest.fixture(scope="module")
def one_job_sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A finished one-job sweep: (the sweep dir, its job dir)."""
    base = tmp_path_factory.mktemp("sweep")
    res = _fedrun(base, "-m", *ONE_ROUND, f"hydra.sweep.dir={base / 'sweep'}", f"cache_dir={base / 'cache'}")
    assert res.returncode == 0, res.stderr
    (job,) = [p for p in (base / "sweep").iterdir() if p.is_dir() and not p.name.startswith(".")]
    return base / "sweep", job


def _rerun_sweep(tmp_path: Path, sweep: Path) -> subprocess.CompletedProcess:
    return _fedrun(tmp_path, "-m", *ONE_ROUND, f"hydra.sweep.dir={sweep}", f"cache_dir={tmp_path / 'cache'}")


def test_a_sweep_job_dir_of_someone_elses_files_is_left_byte_for_byte(
    tmp_path: Path, one_job_sweep: tuple[Path, Path]
) -> None:
    sweep = tmp_path / "sweep"
    shutil.copytree(one_job_sweep[0], sweep, symlinks=True)
    job = sweep / one_job_sweep[1].name
    shutil.rmtree(job)
    _folder_of_files(job)
    before = dir_snapshot(job)
    res = _rerun_sweep(tmp_path, sweep)
    assert res.returncode == 1 and f"{job} is not empty and holds no fedrun run" in res.stderr, res.stderr
    assert dir_snapshot(job) == before


def test_a_sweep_jobs_symlinked_hydra_record_is_refused_before_hydra_writes(
    tmp_path: Path, one_job_sweep: tuple[Path, Path]
) -> None:
    sweep, outside = tmp_path / "sweep", tmp_path / "outside"
    shutil.copytree(one_job_sweep[0], sweep, symlinks=True)
    job = sweep / one_job_sweep[1].name
    outside.mkdir()
    shutil.rmtree(job / ".hydra")
    (job / ".hydra").symlink_to(outside)
    res = _rerun_sweep(tmp_path, sweep)
    _one_line_exit_2(res, f"hydra.sweep.dir: {job / '.hydra'} is a symlink to")
    assert list(outside.iterdir()) == []
