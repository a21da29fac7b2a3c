"""The ``symlink`` table: run dirs and run files that are symlinks (to the user's files, loops, dangling) are
refused in one line naming the key, or replaced (atomic writes), never written through; the user's files stay
byte for byte. The subprocess versions of three rows are in tests/cli/test_run_dir_contract.py."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.hostile import Case, completed_run, ids, run_case

CATEGORY = "symlink"


def _outside(t: Path) -> Path:
    (t / "outside").mkdir(exist_ok=True)
    (t / "outside" / "theirs.txt").write_text("the user's file\n")
    return t / "outside" / "theirs.txt"


def _link(name: str, target: str) -> object:
    """Replace ``done/<name>`` by a symlink to ``target`` (``{t}`` filled; ``outside`` made first)."""

    def setup(t: Path) -> None:
        _outside(t)
        p = t / "done" / name
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        elif p.exists() or p.is_symlink():
            p.unlink()
        p.symlink_to(target.format(t=t))

    return setup


def _at(name: str, target: str) -> object:
    def setup(t: Path) -> None:
        _outside(t)
        (t / name).symlink_to(target.format(t=t))

    return setup


def _loop(t: Path) -> None:
    (t / "loop1").symlink_to(t / "loop2")
    (t / "loop2").symlink_to(t / "loop1")


R = ("resume={done}", "fl.rounds=2")
CASES = [
    Case(
        "run-dir-to-a-user-folder",
        ("hydra.run.dir={t}/link",),
        2,
        ("hydra.run.dir: {t}/link is not empty and holds no fedrun run",),
        _at("link", "{t}/outside"),
        ("outside",),
    ),  # fmt: skip
    Case(
        "hydra-record-out",
        R,
        2,
        ("{t}/done/.hydra is a symlink to",),
        _link(".hydra", "{t}/outside"),
        ("outside", "done"),
        tiny=False,
    ),  # fmt: skip
    Case(
        "log-out",
        R,
        2,
        ("{t}/done/fedrun.log is a symlink to",),
        _link("fedrun.log", "{t}/outside/theirs.txt"),
        ("outside", "done"),
        tiny=False,
    ),  # fmt: skip
    Case(
        "lock-out",
        R,
        2,
        ("{t}/done/.fedrun.lock is a symlink to",),
        _link(".fedrun.lock", "{t}/outside/theirs.txt"),
        ("outside", "done"),
        tiny=False,
    ),  # fmt: skip
    Case(
        "resume-through-a-linked-run-dir",
        ("resume={t}/link", "fl.rounds=2"),
        0,
        (),
        _at("link", "{t}/done"),
        tiny=False,
        after=lambda t: (
            ((t / "link").is_symlink() and '"rounds_completed": 2' in (t / "done" / "summary.json").read_text())
            or pytest.fail("not extended through the link")
        ),
    ),  # fmt: skip
    Case(
        "summary-to-a-user-file",
        ("resume={done}",),
        0,
        (),
        _link("summary.json", "{t}/outside/theirs.txt"),
        ("outside",),
        tiny=False,
    ),  # fmt: skip  the run's summary replaces the link
    Case(
        "metrics-to-a-user-file", R, 0, (), _link("metrics.csv", "{t}/outside/theirs.txt"), ("outside",), tiny=False
    ),  # fmt: skip
    # the red team's next round
    Case(
        "run-dir-dangling",
        ("hydra.run.dir={t}/dangling",),
        2,
        ("hydra.run.dir: {t}/dangling is a symlink to", "leads nowhere"),
        _at("dangling", "{t}/nowhere"),
    ),  # fmt: skip  before: "[Errno 17] File exists"
    Case(
        "run-dir-a-loop",
        ("hydra.run.dir={t}/loop1",),
        2,
        ("hydra.run.dir: {t}/loop1 is a symlink", "leads nowhere"),
        _loop,
    ),  # fmt: skip  before: "Symlink loop from ..." naming no key
    Case(
        "run-dir-below-a-loop", ("hydra.run.dir={t}/loop1/sub",), 2, ("hydra.run.dir: {t}/loop1 is a symlink",), _loop
    ),  # fmt: skip
    Case(
        "sweep-dir-dangling",
        ("-m", "seed=0,1", "hydra.sweep.dir={t}/dangling"),
        2,
        ("hydra.sweep.dir: {t}/dangling is a symlink",),
        _at("dangling", "{t}/nowhere"),
    ),  # fmt: skip
    Case(
        "lock-a-self-loop",
        R,
        2,
        ("cannot write .fedrun.lock in {t}/done: it is a symlink",),
        _link(".fedrun.lock", "{t}/done/.fedrun.lock"),
        ("done",),
        tiny=False,
    ),  # fmt: skip  before: RuntimeError
    Case(
        "config-to-etc-passwd",
        ("resume={done}",),
        2,
        ("resume: {t}/done/config.yaml is not a fedrun config",),
        _link("config.yaml", "/etc/passwd"),
        ("done",),
        tiny=False,
    ),  # fmt: skip  before: "algorithm.name: missing"
    Case(
        "checkpoint-to-a-user-file",
        R,
        2,
        ("{t}/done/checkpoint.pt: unreadable checkpoint",),
        _link("checkpoint.pt", "{t}/outside/theirs.txt"),
        ("outside", "done"),
        tiny=False,
    ),  # fmt: skip
]


@pytest.fixture(scope="module")
def done(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return completed_run(tmp_path_factory.mktemp("symlink") / "run")


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_symlink(
    case: Case, tmp_path: Path, done: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    run_case(case, tmp_path, monkeypatch, capsys, done)
    assert not (tmp_path / "nowhere").exists()
    assert os.listdir(tmp_path / "outside") in ([], ["theirs.txt"]) if (tmp_path / "outside").exists() else True
