"""fedrun.storage.atomic: atomic writes leave the old file or the new one, never a temp file, and name what failed."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fedrun.storage.atomic import WriteError, atomic_write, remove_stale_temps, temp_path


def _fail_writes(monkeypatch: pytest.MonkeyPatch, exc: BaseException, after: int = 0) -> None:
    """os.write writes ``after`` bytes, then raises ``exc`` (a full disk, an interrupt)."""
    real = os.write

    def write(fd: int, data: bytes) -> int:
        if after:
            real(fd, bytes(data)[:after])
        raise exc

    monkeypatch.setattr(os, "write", write)


@pytest.mark.parametrize("exc", [OSError(errno.ENOSPC, "No space left on device"), KeyboardInterrupt()])
def test_a_failed_write_keeps_the_old_file_and_removes_its_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exc: BaseException
) -> None:
    target = tmp_path / "metrics.csv"
    atomic_write(target, "old\n")
    _fail_writes(monkeypatch, exc, after=2)
    with pytest.raises(WriteError if isinstance(exc, OSError) else KeyboardInterrupt) as e:
        atomic_write(target, "new contents\n")
    monkeypatch.undo()
    assert target.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.csv"]
    if isinstance(exc, OSError):
        assert e.value.errno == errno.ENOSPC
        assert str(e.value) == f"cannot write metrics.csv in {tmp_path}: No space left on device"


def test_a_directory_that_cannot_be_written_is_a_write_error_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "gone" / "summary.json"  # what a read-only directory gives, without needing one
    with pytest.raises(WriteError) as e:
        atomic_write(missing, "{}")
    assert e.value.errno == errno.ENOENT
    assert str(e.value).startswith(f"cannot write summary.json in {missing.parent}: ")


def test_stale_temp_files_of_dead_processes_are_removed(tmp_path: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)  # exited: no process has this pid now (barring reuse within milliseconds)
    stale = [tmp_path / f".metrics.csv.{dead_pid}.tmp", tmp_path / f".fmnist-iid-abc.npz.{dead_pid}.tmp.npz"]
    mine = temp_path(tmp_path / "summary.json")
    # not fedrun's pattern (.<name>.<pid>.tmp): a user's files, never deleted
    theirs = [tmp_path / f"name.{dead_pid}.tmp", tmp_path / f"fmnist-iid-abc.npz.{dead_pid}.tmp.npz"]
    keep = [tmp_path / "metrics.csv", tmp_path / "notes.tmp", mine, *theirs]
    for f in stale + keep:
        f.write_text("x")
    assert sorted(remove_stale_temps(tmp_path)) == sorted(stale)
    assert sorted(tmp_path.iterdir()) == sorted(keep)
    assert remove_stale_temps(tmp_path, any_pid=True) == [mine]  # the caller holds the folder's lock


def test_write_metrics_appends_the_text_pandas_would_write(tmp_path: Path) -> None:
    """An evaluated round's write formats only the new row when the earlier rows are the last write's and every
    row has the same columns and value types: the file is byte for byte pandas' table of all rows, also when the
    rows' types change (a full rewrite) or the rows are cut back (a rewind)."""
    import numpy as np
    import pandas as pd

    from fedrun.storage import atomic

    rng = np.random.default_rng(5)
    path = tmp_path / "metrics.csv"
    rows: list[dict[str, object]] = []

    def row(r: int) -> dict[str, object]:
        x = float(rng.choice([rng.normal() * 10.0 ** rng.integers(-12, 17), float("nan"), 0.1, 1e16, -0.0]))
        y = float(rng.normal() * 10.0 ** rng.integers(-30, 30))
        note = str(rng.choice(["a,b", 'say "x"', "two\nlines", "", "plain"]))
        flag, clients = bool(r % 2), int(rng.integers(9))
        return {"round": r, "test_acc": x, "loss": y, "note": note, "flag": flag, "clients": clients}

    appended = 0
    for r in range(400):
        new = row(r)
        if r == 325:
            new["clients"] = None  # a None: its column turns float in pandas, so the whole table is rewritten
        if r == 300:
            del rows[290:]  # a rewind writes fewer rows
            atomic.write_metrics(path, rows)
            assert path.read_text() == pd.DataFrame(rows).to_csv(index=False)
        rows.append(new)
        before = atomic._METRICS_TEXT.get(path)
        atomic.write_metrics(path, rows)
        appended += before is not None and before[0] == len(rows) - 1 and atomic._types(new) is not None
        assert path.read_text() == pd.DataFrame(rows).to_csv(index=False), r
    assert appended > 250  # the appending path was taken (a check that the test is not vacuous)
