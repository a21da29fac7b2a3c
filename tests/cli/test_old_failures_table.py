"""The last old failures of the red team's earlier rounds (issue 22, point 6), each one line and an exit code:

- a directory in the way of a run file (``checkpoint.pt/``) is refused up front, naming it (it restarted the run,
  which then failed at its first save with "free some space");
- a ``config.yaml`` that is no mapping (a YAML list) is refused and left byte for byte (it was overwritten);
- Hydra's own write of its record failing (a tiny disk) names the file and removes the truncated one;
- every write error gives the advice of its errno (only ENOSPC is "free some space");
- a run dir with a character Hydra's override grammar allows only quoted (``ü``, ``;``) says how to quote it;
- ``resume=DIR +fl.bogus=1`` / ``'~fl.lr'`` name the key without its ``+`` / ``~``.

The LEAF cases (a lone surrogate, ``"x": [5]``) are rows of tests/data/test_fault_table.py.
"""

from __future__ import annotations

import builtins
import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fedrun.cli import main as cli
from fedrun.storage.atomic import WRITE_ADVICE, WriteError, atomic_write
from fedrun.storage.rundir import RunDir
from tests.conftest import main_exit_code

BASE = ["experiment=smoke", "output.quiet=true", "output.plots=false", "fl.rounds=1", "hardware.threads=1"]
Result = tuple[object, str]  # exit code, stderr


@pytest.fixture
def fedrun(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, tmp_path: Path) -> Callable[..., Result]:
    """``fedrun ARGS`` in-process from an empty working directory: (exit code, stderr)."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)

    def call(*args: str) -> Result:
        code = main_exit_code(monkeypatch, ["fedrun", *args])
        return code, capsys.readouterr().err

    return call


def _one_line(result: Result, code: int, start: str) -> str:
    got, err = result
    assert got == code, err[-2000:]
    assert err.strip().count("\n") == 0 and "Traceback" not in err, err[-2000:]
    assert err.startswith(f"fedrun: error: {start}"), err
    return err.strip()


def _tree(folder: Path) -> dict[str, bytes | str]:
    return {str(p.relative_to(folder)): "dir" if p.is_dir() else p.read_bytes() for p in sorted(folder.rglob("*"))}


# ---- the run directory: a directory in the way, a config.yaml that is no mapping -----------------------------


@pytest.mark.parametrize("name", ["checkpoint.pt", "summary.json", "metrics.csv", "config.yaml"])
def test_a_directory_in_the_way_of_a_run_file_is_refused_up_front(
    fedrun: Callable[..., Result], tmp_path: Path, name: str
) -> None:
    """Before: the run started, trained a round and failed at its first save with "free some space"."""
    run_dir = tmp_path / "run"
    (run_dir / name).mkdir(parents=True)
    (run_dir / name / "kept.txt").write_text("mine\n")
    before = _tree(run_dir)
    line = _one_line(fedrun(*BASE, f"hydra.run.dir={run_dir}", f"cache_dir={tmp_path / 'c'}"), 2, "hydra.run.dir: ")
    assert f"{run_dir / name} is a directory where fedrun writes its {name} file" in line
    assert "free some space" not in line
    assert _tree(run_dir) == before


@pytest.mark.parametrize("text", ["- a\n- b\n", "just a string\n", "", "42\n"])
def test_a_config_yaml_that_is_no_mapping_is_refused_and_left_byte_for_byte(
    fedrun: Callable[..., Result], tmp_path: Path, text: str
) -> None:
    """Before: a YAML list (or scalar, or nothing) in config.yaml was silently overwritten by the new run's."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(text)
    line = _one_line(fedrun(*BASE, f"hydra.run.dir={run_dir}", f"cache_dir={tmp_path / 'c'}"), 2, "")
    assert f"{run_dir / 'config.yaml'} is not a fedrun config (a mapping of config keys)" in line
    assert (run_dir / "config.yaml").read_text() == text
    assert not (run_dir / "summary.json").exists() and not (run_dir / "metrics.csv").exists()


# ---- write errors: the file, and the advice of the errno -----------------------------------------------------

ERRNOS = [
    (errno.ENOSPC, 1, "free some space"),
    (errno.EFBIG, 1, "ulimit -f"),
    (errno.EISDIR, 2, "a directory is in the way"),
    (errno.EACCES, 2, "permissions"),
    (errno.EROFS, 2, "read-only"),
]


@pytest.mark.parametrize(("code", "exit_code", "advice"), ERRNOS, ids=[errno.errorcode[e[0]] for e in ERRNOS])
def test_hydras_own_write_failing_names_the_file_and_leaves_no_truncated_one(
    fedrun: Callable[..., Result],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    code: int,
    exit_code: int,
    advice: str,
) -> None:
    """Before (an 8 KB disk): "[Errno 28] No space left on device" naming no file, and a 0-byte overrides.yaml."""
    real_open = builtins.open

    class Full:
        def __init__(self, f: Any) -> None:
            self.f = f

        def write(self, _: str) -> int:
            raise OSError(code, os.strerror(code))

        def __enter__(self) -> Full:
            return self

        def __exit__(self, *_: object) -> None:
            self.f.close()

    def opener(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        f = real_open(file, mode, *args, **kwargs)
        return Full(f) if "w" in mode and str(file).endswith("overrides.yaml") else f

    monkeypatch.setattr(builtins, "open", opener)
    run_dir = tmp_path / "run"
    result = fedrun(*BASE, f"hydra.run.dir={run_dir}", f"cache_dir={tmp_path / 'c'}")
    monkeypatch.undo()
    line = _one_line(result, exit_code, f"cannot write overrides.yaml in {run_dir / '.hydra'}: {os.strerror(code)}; ")
    assert advice in line and (code == errno.ENOSPC) == ("free some space" in line)
    assert not (run_dir / ".hydra" / "overrides.yaml").exists()


@pytest.mark.parametrize(("code", "exit_code", "advice"), ERRNOS, ids=[errno.errorcode[e[0]] for e in ERRNOS])
def test_a_run_file_write_error_gives_the_advice_of_its_errno(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
    tmp_path: Path,
    code: int,
    exit_code: int,
    advice: str,
) -> None:
    """Before: every errno but the permission ones said "free some space" (EFBIG, EISDIR too)."""

    def write(fd: int, data: bytes) -> int:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, "write", write)
    with pytest.raises(WriteError) as e:
        atomic_write(tmp_path / "checkpoint.pt", b"x" * 10)
    monkeypatch.undo()
    assert e.value.errno == code and advice in e.value.advice
    assert list(tmp_path.iterdir()) == []  # no temp file left
    with pytest.raises(SystemExit) as ex:
        cli._write_failed(RunDir(tmp_path), e.value, multirun=False)
    assert ex.value.code == exit_code
    err = capsys.readouterr().err
    assert err.startswith(f"fedrun: error: cannot write checkpoint.pt in {tmp_path}: {os.strerror(code)}; ")
    assert advice in err and err.count("\n") == 1 and (code == errno.ENOSPC) == ("free some space" in err)


def test_only_a_full_disk_or_quota_is_advised_to_free_space() -> None:
    assert [e for e, advice in WRITE_ADVICE.items() if "free some space" in advice] == [errno.ENOSPC, errno.EDQUOT]


# ---- the override grammar: characters that need quotes ---------------------------------------------------------


@pytest.mark.parametrize("name", ["rün", "a;b", "a#b", "a&b", "日本"])
def test_a_run_dir_with_a_character_that_needs_quotes_says_how_to_quote_it(
    fedrun: Callable[..., Result], tmp_path: Path, name: str
) -> None:
    """Before: "unmatched quote or bracket at 'ü'", though the override has neither."""
    where = f"{tmp_path}/{name}"
    line = _one_line(fedrun(*BASE, f"hydra.run.dir={where}"), 2, "hydra.run.dir: the character ")
    assert "unmatched" not in line and "must be inside quotes" in line
    assert f"""'hydra.run.dir="{where}"'""" in line
    assert not Path(where).exists()


def test_the_quoted_run_dir_the_message_suggests_is_accepted(fedrun: Callable[..., Result], tmp_path: Path) -> None:
    where = tmp_path / "rün;1"
    code, err = fedrun(*BASE, f'hydra.run.dir="{where}"', f"cache_dir={tmp_path / 'c'}")
    assert code == 0, err
    assert RunDir(where).status() == "completed"


def test_an_unmatched_quote_is_still_called_one(fedrun: Callable[..., Result], tmp_path: Path) -> None:
    line = _one_line(fedrun(*BASE, f'hydra.run.dir="{tmp_path}/a'), 2, "hydra.run.dir: cannot parse the override")
    assert "unmatched quote or bracket" in line


# ---- resume: +key / ~key ---------------------------------------------------------------------------------------


@pytest.fixture
def completed(fedrun: Callable[..., Result], tmp_path: Path) -> Path:
    run_dir = tmp_path / "done"
    code, err = fedrun(*BASE, f"hydra.run.dir={run_dir}", f"cache_dir={tmp_path / 'c'}")
    assert code == 0, err
    return run_dir


@pytest.mark.parametrize(
    ("override", "start"),
    [
        ("+fl.bogus=1", "fl.bogus: unknown key; valid keys: "),
        ("++fl.bogus=1", "fl.bogus: unknown key; valid keys: "),
        ("~fl.lr", "resume: fl.lr: cannot be deleted in a resumed run"),
        ("~fl.lr=0.1", "resume: fl.lr: cannot be deleted in a resumed run"),
    ],
)
def test_resume_names_the_key_without_its_plus_or_tilde(
    fedrun: Callable[..., Result], completed: Path, override: str, start: str
) -> None:
    """Before: "+fl: unknown top-level key" / "~fl: unknown top-level key"."""
    before = _tree(completed)
    line = _one_line(fedrun(f"resume={completed}", override), 2, start)
    assert "+fl" not in line and "~fl" not in line
    assert _tree(completed) == before


def test_resume_with_a_plus_on_a_key_it_may_change_takes_it(fedrun: Callable[..., Result], completed: Path) -> None:
    code, err = fedrun(f"resume={completed}", "+fl.rounds=2")
    assert code == 0, err
    assert RunDir(completed).summary().fields["rounds_completed"] == 2  # type: ignore[union-attr]
