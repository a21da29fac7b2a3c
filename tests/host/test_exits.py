"""fedrun/host/exits.py: an entry point freezes what is alive once its work is done, and what must happen at exit
still happens."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fedrun.cli import console
from fedrun.host.exits import ending_process
from tests.conftest import REPO


@pytest.fixture
def freezes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The calls of gc.freeze, recorded instead of made (a test process goes on)."""
    calls: list[int] = []
    monkeypatch.setattr(gc, "freeze", lambda: calls.append(1))
    return calls


def test_the_work_is_done_then_frozen_also_when_it_raises(freezes: list[int]) -> None:
    assert ending_process(lambda: 7) == 7 and freezes == [1]
    with pytest.raises(SystemExit):
        ending_process(lambda: sys.exit(3))
    assert freezes == [1, 1]


@pytest.mark.parametrize(("script", "argv"), [("report", ["--version"]), ("reproduce", ["list"])])
def test_each_console_script_is_its_main_then_frozen(
    script: str,
    argv: list[str],
    freezes: list[int],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(sys, "argv", [f"fedrun-{script}", *argv])
    assert getattr(console, script)() == 0 and freezes == [1]
    assert capsys.readouterr().out.strip()
    scripts = (REPO / "pyproject.toml").read_text()
    assert f'fedrun-{script} = "fedrun.cli.console:{script}"' in scripts
    assert 'fedrun = "fedrun.cli.__main__:main"' in scripts


def test_the_fedrun_command_freezes_after_hydra_ends_it(freezes: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    from fedrun.cli import __main__ as entry

    monkeypatch.setattr(entry, "_main", lambda: sys.exit(0))
    with pytest.raises(SystemExit):
        entry.main()
    assert freezes == [1]


def test_a_frozen_process_still_runs_its_atexit_handlers_and_flushes_its_output(tmp_path: Path) -> None:
    done = tmp_path / "atexit.txt"
    code = (
        "import atexit, logging, sys, torch\n"
        "from fedrun.host.exits import ending_process\n"
        f"atexit.register(lambda: open({str(done)!r}, 'w').write('ran'))\n"
        f"logging.basicConfig(filename={str(tmp_path / 'log.txt')!r})\n"
        "def work():\n"
        "    logging.getLogger('x').warning('logged')\n"
        "    sys.stdout.write('unflushed')\n"
        "    return 5\n"
        "sys.exit(ending_process(work))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 5 and proc.stdout == "unflushed", proc.stderr
    assert done.read_text() == "ran" and "logged" in (tmp_path / "log.txt").read_text()
