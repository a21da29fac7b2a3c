"""``cache_dir``: not a directory is bad input (exit 2 naming it); a cache that cannot be written is one warning."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from fedrun.core.errors import ConfigError
from fedrun.data.base import Dataset, Split
from fedrun.data.partition import make_partition
from fedrun.data.partitions.basic import DirichletParams
from fedrun.storage import cache
from fedrun.storage.cache import cache_file, write_cache
from tests.conftest import main_exit_code

SMALL = [
    "experiment=smoke",
    "fl.rounds=1",
    "data.max_train_samples=300",
    "data.max_test_samples=100",
    "fl.clients=3",
    "hardware.threads=1",
    "hardware.engine=auto",
]


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cache, "_WARNED", set())


def _toy() -> Dataset:
    y = torch.from_numpy(np.random.default_rng(0).integers(0, 10, 300))
    split = Split(torch.zeros(300, 1, 2, 2, dtype=torch.uint8), y)
    return Dataset("toy", split, split, 10, (1, 2, 2))


@pytest.mark.parametrize("where", ["a file", "/dev/null", "under /dev/null", "under a file"])
def test_a_cache_dir_that_is_not_a_directory_is_bad_input(tmp_path: Path, where: str) -> None:
    f = tmp_path / "f"
    f.write_text("x")
    path = {"a file": f, "/dev/null": "/dev/null", "under /dev/null": "/dev/null/c", "under a file": f / "c"}[where]
    with pytest.raises(ConfigError, match=r"^cache_dir: .* not a directory") as e:
        cache_file(str(path), "engine-auto.json")
    assert e.value.field == "cache_dir"


def test_an_unwritable_cache_is_one_warning_and_the_partition_is_computed(
    capsys: pytest.CaptureFixture,
) -> None:
    parts = make_partition(_toy(), "dirichlet", DirichletParams(alpha=0.5), 3, 0, "/proc")
    again = make_partition(_toy(), "dirichlet", DirichletParams(alpha=0.5), 3, 0, "/proc")
    assert sum(len(p) for p in parts) == 300
    assert all(np.array_equal(a, b) for a, b in zip(parts, again, strict=True))
    err = capsys.readouterr().err
    assert err.startswith("fedrun: warning: cache_dir: cannot write /proc/") and err.count("\n") == 1


def test_a_failed_cache_write_leaves_no_temp_file(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    def full_disk(tmp: Path) -> None:
        tmp.write_bytes(b"half")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    assert write_cache(tmp_path / "x.npz", full_disk) is False
    assert list(tmp_path.iterdir()) == []
    err = capsys.readouterr().err
    why = f"cannot write {tmp_path / 'x.npz'} (No space left on device)"
    assert err == f"fedrun: warning: cache_dir: {why}; running without caching it\n"


def _fedrun(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, *args: str) -> Any:
    """``fedrun`` in-process (the console script's code path) in ``tmp_path``: (exit code, stderr)."""
    monkeypatch.chdir(tmp_path)
    code = main_exit_code(monkeypatch, ["fedrun", *SMALL, *args, f"hydra.run.dir={tmp_path / 'run'}"])
    return code, capsys.readouterr().err


def test_cli_cache_dir_dev_null_is_exit_2_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    code, err = _fedrun(tmp_path, monkeypatch, capsys, "cache_dir=/dev/null")
    assert code == 2, err
    assert err.startswith("fedrun: error: cache_dir: /dev/null is not a directory") and err.count("\n") == 1
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [".hydra", "error.txt"]


def test_cli_unwritable_cache_dir_warns_once_and_the_run_completes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    code, err = _fedrun(tmp_path, monkeypatch, capsys, "cache_dir=/proc", "output.quiet=true")
    assert code == 0, err
    warnings = [ln for ln in err.splitlines() if ln.startswith("fedrun: warning: cache_dir")]
    assert len(warnings) == 1 and "Traceback" not in err
    assert '"status": "completed"' in (tmp_path / "run" / "summary.json").read_text()
