"""A full disk (ENOSPC, faked in os.write) ends a run in one line naming the file and its directory, exit 1,
summary.json marked failed, no temp file; re-running after freeing space gives the uninterrupted metrics."""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from fedrun.cli import main as cli
from fedrun.config.schema import RunSpec
from fedrun.run.loop import run
from fedrun.storage.atomic import TEMP_SUFFIX
from tests.conftest import compose_cfg
from tests.run.test_resume import SMALL, _metrics


def _disk_full_at(monkeypatch: pytest.MonkeyPatch, name: str, nth: int) -> None:
    """From the ``nth`` atomic write of ``name`` on, every write to the disk fails with ENOSPC."""
    real, seen = os.write, {"n": 0, "full": False}

    def write(fd: int, data: bytes) -> int:
        path = os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))
        if path.startswith(f".{name}.") and TEMP_SUFFIX.search(path):
            seen["n"] += 1
            seen["full"] |= seen["n"] >= nth
        if seen["full"]:
            real(fd, bytes(data)[: len(data) // 3])  # part of it fits
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, data)

    monkeypatch.setattr(os, "write", write)


@pytest.mark.parametrize(("name", "nth"), [("checkpoint.pt", 3), ("metrics.csv", 5), ("summary.json", 2)])
def test_enospc_is_one_line_then_a_rerun_resumes_exactly(
    tmp_path: Path,
    make_spec: Callable[..., RunSpec],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
    name: str,
    nth: int,
) -> None:
    run_dir = tmp_path / "run"
    cfg = compose_cfg([*SMALL, f"cache_dir={tmp_path / 'cache'}"])
    _disk_full_at(monkeypatch, name, nth)
    with pytest.raises(SystemExit) as e:
        cli.execute(cfg, run_dir, multirun=False)
    monkeypatch.undo()
    assert e.value.code == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err
    assert err.startswith(f"fedrun: error: cannot write {name} in {run_dir}: No space left on device;")
    assert not [p for p in run_dir.iterdir() if TEMP_SUFFIX.search(p.name)]
    assert json.loads((run_dir / "summary.json").read_text())["status"] in ("failed", "running")

    cli.execute(cfg, run_dir, multirun=False)  # space freed: the same command again
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "completed"
    assert not [p for p in run_dir.iterdir() if TEMP_SUFFIX.search(p.name)]
    reference = tmp_path / "reference"
    reference.mkdir()
    run(make_spec(*SMALL), reference)
    pd.testing.assert_frame_equal(_metrics(run_dir), _metrics(reference), check_exact=True)


def test_enospc_marks_summary_failed_when_it_can_still_be_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Only the large file fails (a nearly full disk): summary.json says failed, with the one-line reason."""
    run_dir = tmp_path / "run"
    real = os.write

    def write(fd: int, data: bytes) -> int:
        if os.path.basename(os.readlink(f"/proc/self/fd/{fd}")).startswith(".checkpoint.pt."):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, data)

    monkeypatch.setattr(os, "write", write)
    with pytest.raises(SystemExit) as e:
        cli.execute(compose_cfg([*SMALL, f"cache_dir={tmp_path / 'cache'}"]), run_dir, multirun=False)
    monkeypatch.undo()
    assert e.value.code == 1
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "failed"
    assert summary["error"] == f"cannot write checkpoint.pt in {run_dir}: No space left on device"
    assert summary["algorithm"] == "fedavg"  # what the summary said of the run is kept
    assert "cannot write checkpoint.pt" in capsys.readouterr().err
