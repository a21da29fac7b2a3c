"""One process per run directory: a second is refused in one line and touches nothing; stale temp files of dead
processes are removed when a run starts."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fedrun.cli import main as cli
from fedrun.storage.atomic import TEMP_SUFFIX
from fedrun.storage.lock import LOCK_FILE, RunDirBusy, run_dir_lock
from tests.conftest import REPO, compose_cfg
from tests.run.test_resume import SMALL


def test_the_lock_is_exclusive_and_released(tmp_path: Path) -> None:
    with run_dir_lock(tmp_path / "run"), pytest.raises(RunDirBusy, match="in use by another fedrun process"):
        with run_dir_lock(tmp_path / "run"):
            pass
    with run_dir_lock(tmp_path / "run"):  # released: taken again
        pass


def test_a_second_process_on_a_run_dir_is_refused_in_one_line_and_touches_nothing(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(yaml.safe_dump({"seed": 5}))  # the first run's (any content)
    before = {p.name: p.read_bytes() for p in run_dir.iterdir()}
    args = [*SMALL, "seed=1", f"hydra.run.dir={run_dir}", f"cache_dir={tmp_path / 'cache'}"]
    with run_dir_lock(run_dir):  # this process is the first run
        res = subprocess.run(
            [sys.executable, "-m", "fedrun.cli", *args],
            cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    assert res.returncode == 2
    assert res.stderr.strip().count("\n") == 0 and "Traceback" not in res.stderr
    assert res.stderr.startswith(f"fedrun: error: {run_dir}: in use by another fedrun process")
    after = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.name != ".hydra"}  # .hydra: Hydra's, first
    assert after == {**before, LOCK_FILE: b""}


def test_stale_temp_files_are_removed_when_a_run_starts(tmp_path: Path) -> None:
    run_dir, cache = tmp_path / "run", tmp_path / "cache"
    run_dir.mkdir()
    cache.mkdir()
    dead = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True).stdout)
    (run_dir / f".metrics.csv.{os.getpid()}.tmp").write_text("half")  # any pid: the run holds the dir's lock
    (run_dir / f".checkpoint.pt.{dead}.tmp").write_text("half")
    (cache / f".engine-auto.json.{dead}.tmp").write_text("half")
    cli.execute(compose_cfg([*SMALL, "fl.rounds=1", f"cache_dir={cache}"]), run_dir, multirun=False)
    assert not [p for d in (run_dir, cache) for p in d.iterdir() if TEMP_SUFFIX.search(p.name)]


def _unprivileged() -> list[str] | None:
    """A command prefix under which file permissions apply (root ignores them); None when there is none."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    caps = "-dac_override,-dac_read_search"
    return [setpriv, f"--inh-caps={caps}", f"--bounding-set={caps}", "--"] if setpriv else None


def test_a_read_only_run_dir_is_one_line_naming_it(tmp_path: Path) -> None:
    prefix = _unprivileged()
    if prefix is None:
        pytest.skip("running as root without setpriv: permissions cannot be enforced")
    run_dir = tmp_path / "run"
    cli.execute(compose_cfg([*SMALL, "fl.rounds=1", f"cache_dir={tmp_path / 'cache'}"]), run_dir, multirun=False)
    (run_dir / LOCK_FILE).unlink()
    (run_dir / "summary.json").unlink()  # unfinished: a resume must write
    run_dir.chmod(0o555)
    try:
        res = subprocess.run(
            [*prefix, sys.executable, "-m", "fedrun.cli", f"resume={run_dir}"],
            cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    finally:
        run_dir.chmod(0o755)
    assert res.returncode == 2
    assert res.stderr.strip().count("\n") == 0 and "Traceback" not in res.stderr
    assert res.stderr.startswith(f"fedrun: error: cannot write {LOCK_FILE} in {run_dir}: Permission denied; valid: ")


def test_a_lock_held_by_another_process_is_waited_for_when_asked_and_one_of_this_process_never(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    hold = (
        "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT);"
        " fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); sys.stdin.read()"
    )  # holds the lock until its stdin closes: no timing, so it holds on a loaded machine
    other = subprocess.Popen(
        [sys.executable, "-c", hold, str(run_dir / LOCK_FILE)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert other.stdout is not None and other.stdout.readline().strip() == "held"
        with pytest.raises(RunDirBusy), run_dir_lock(run_dir):  # not asked to wait: refused at once
            pass
        waited: list[int] = []

        def let_go(pid: int) -> None:  # told whom it waits for: the holder may now end
            waited.append(pid)
            assert other.poll() is None and other.stdin is not None  # it still holds the lock we wait for
            other.stdin.close()

        with run_dir_lock(run_dir, wait=let_go):
            assert other.wait(timeout=60) == 0  # taken only once the other process had let go
        assert waited == [other.pid]
    finally:
        other.wait(timeout=60)
    with run_dir_lock(run_dir), pytest.raises(RunDirBusy), run_dir_lock(run_dir, wait=waited.append):
        pass  # this process's own lock: waiting would never end
    assert waited == [other.pid]
