"""Every run records the code it ran in summary.json: git commit and dirty flag, or the package version."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import fedrun
from fedrun.cli import main as cli
from fedrun.run.summary import code_provenance
from tests.conftest import compose_cfg
from tests.run.test_standin_run import TINY


def _git(root: Path, *args: str) -> str:
    cmd = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t", *args]
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip()


def test_a_checkout_gives_its_commit_and_whether_tracked_files_changed(tmp_path: Path) -> None:
    (tmp_path / "fedrun").mkdir()
    (tmp_path / "fedrun" / "x.py").write_text("a = 1\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-qm", "x")
    head = _git(tmp_path, "rev-parse", "HEAD")
    code_provenance.cache_clear()
    assert code_provenance(tmp_path) == {"commit": head, "dirty": False}
    (tmp_path / "notes.txt").write_text("untracked files do not make it dirty")
    code_provenance.cache_clear()
    assert code_provenance(tmp_path) == {"commit": head, "dirty": False}
    (tmp_path / "fedrun" / "x.py").write_text("a = 2\n")
    code_provenance.cache_clear()
    assert code_provenance(tmp_path) == {"commit": head, "dirty": True}
    code_provenance.cache_clear()


def test_outside_a_checkout_the_package_version(tmp_path: Path) -> None:
    (tmp_path / "fedrun").mkdir()
    assert code_provenance(tmp_path) == {"version": fedrun.__version__}
    inner = tmp_path / "site-packages"  # a package inside someone else's repository is not a checkout of fedrun
    (inner / "fedrun").mkdir(parents=True)
    _git(tmp_path, "init", "-q")
    assert code_provenance(inner) == {"version": fedrun.__version__}


def test_a_run_writes_its_code_into_summary_json(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    cli.execute(compose_cfg([*TINY, f"cache_dir={tmp_path / 'cache'}"]), run_dir, multirun=True, label="run")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["code"] == code_provenance()
    assert set(summary["code"]) in ({"commit", "dirty"}, {"version"})
