"""The hostile-input tables' shared runner (issue 22): a :class:`Case` is an id, the hostile input (fedrun's
arguments, and a set-up that plants files), the expected exit code, the key words of its one stderr line, and what
must be left byte for byte on disk. :func:`run_case` runs it in-process (tests/conftest.py ``main_exit_code``).

Placeholders in arguments and words: ``{t}`` is the case's folder, ``{done}`` a completed run copied into it.
Every case runs from ``{t}/cwd``, which holds one file of the user's and must be left as it was.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fedrun.cli import hydra_patches
from tests.conftest import dir_snapshot, main_exit_code

# a run of about a second: 300 Fashion-MNIST images, 4 clients, one round
TINY = (
    "experiment=smoke", "data.max_train_samples=300", "data.max_test_samples=100", "fl.clients=4", "fl.rounds=1",
    "model.hidden=[8]", "hardware.threads=1", "hardware.engine=sequential", "output.plots=false", "output.quiet=true",
)  # fmt: skip


@dataclass(frozen=True)
class Case:
    """One row of a table."""

    id: str
    args: tuple[str, ...]  # fedrun's arguments after TINY (when ``tiny``) and cache_dir={t}/cache
    code: int  # the exit code
    words: tuple[str, ...] = ()  # pieces of stderr (with code 2: of its one line)
    setup: Callable[[Path], Any] | None = None  # plants files under {t}; what it returns is kept alive for the run
    kept: tuple[str, ...] = ()  # paths under {t} left byte for byte (the cwd always is)
    after: Callable[[Path], None] | None = None  # a further check of {t} after the run
    tiny: bool = True  # prepend TINY and a cache dir (False: a resume, which takes the run's own config)


def snapshot(p: Path) -> object:
    if p.is_symlink():
        return f"-> {os.readlink(p)}"
    if p.is_dir():
        return dir_snapshot(p)
    return p.read_bytes() if p.exists() else None


def completed_run(where: Path, *overrides: str) -> Path:
    """A completed run of TINY (plus ``overrides``) at ``where`` (for module-scoped fixtures: Hydra's patches are
    put back after it, as tests/conftest.py does after each test, so they do not leak into later test modules)."""
    restore = hydra_patches.saved()
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(where.parent)
        try:
            code = main_exit_code(
                mp, ["fedrun", *TINY, *overrides, f"hydra.run.dir={where}", f"cache_dir={where}.cache"]
            )
        finally:
            restore()
    assert code == 0
    assert json.loads((where / "summary.json").read_text())["status"] == "completed"
    return where


def run_case(
    case: Case, tmp: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, done: Path | None = None
) -> str:
    """Run ``case`` in ``tmp``; assert its exit code, words, one line (exit 2) and what it left; its stderr."""
    cwd = tmp / "cwd"
    cwd.mkdir()
    (cwd / "mine.txt").write_text("the user's own file\n")
    if done is not None:
        shutil.copytree(done, tmp / "done", symlinks=True)
    alive = case.setup(tmp) if case.setup else None
    before = {k: snapshot(tmp / k) for k in case.kept}
    before_cwd = dir_snapshot(cwd)
    fill = {"t": str(tmp), "done": str(tmp / "done")}
    args = [a.format(**fill) for a in case.args]
    if case.tiny:  # flags (-m) first: Hydra's parser takes none after the overrides
        flags = [a for a in args if a.startswith("-")]
        args = [*flags, *TINY, f"cache_dir={tmp / 'cache'}", *[a for a in args if not a.startswith("-")]]
    monkeypatch.chdir(cwd)
    try:
        code = main_exit_code(monkeypatch, ["fedrun", *args])
    finally:
        if hasattr(alive, "close"):
            alive.close()
    err = capsys.readouterr().err
    assert code == case.code, err[-2000:]
    assert "Traceback" not in err, err[-2000:]
    if case.code == 2:
        assert err.startswith("fedrun: error: ") and err.strip().count("\n") == 0, err[-2000:]
    for w in case.words:
        assert w.format(**fill) in err, f"{w.format(**fill)!r} not in {err[-1000:]!r}"
    assert dir_snapshot(cwd) == before_cwd
    for k, v in before.items():
        assert snapshot(tmp / k) == v, f"{k} changed"
    if case.after:
        case.after(tmp)
    return err


class FifoGuard:
    """Opens the FIFO for writing (and closes it) after a few seconds, again and again, until closed: a reader
    that blocked on it gets end-of-file and its case fails on its words instead of hanging the suite."""

    def __init__(self, fifo: Path) -> None:
        self.fifo, self.done = fifo, threading.Event()
        self.thread = threading.Thread(target=self._unblock, daemon=True)
        self.thread.start()

    def _unblock(self) -> None:
        while not self.done.wait(5.0):
            try:
                os.close(os.open(self.fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:  # no reader waiting: nothing to unblock
                pass

    def close(self) -> None:
        self.done.set()
        self.thread.join()


def ids(cases: list[Case]) -> list[str]:
    return [c.id for c in cases]
