"""The ``traversal`` table: run, sweep and resume directories and Hydra's sub-folders that would leave their folder
(``.``, ``..``, absolute paths, ``~``) are refused in one line naming the key; the user's files stay as they were.
The subprocess versions of some rows are in tests/cli/test_run_dir_contract.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.hostile import Case, completed_run, ids, run_case

CATEGORY = "traversal"
CWD = "is the current directory or one above it"
BELOW = "is not a folder below its directory"


def _user_folder(t: Path) -> None:
    (t / "a").mkdir()
    (t / "a" / "thesis.tex").write_text("\\section{x}\n")


CASES = [
    Case("run-dir-dot", ("hydra.run.dir=.",), 2, ("hydra.run.dir: '.' " + CWD,)),
    Case("run-dir-dotdot", ("hydra.run.dir=..",), 2, ("hydra.run.dir: '..' " + CWD,), _user_folder, ("a",)),
    Case("run-dir-root", ("hydra.run.dir=/",), 2, ("hydra.run.dir: '/' " + CWD,)),
    Case("run-dir-down-and-up", ("hydra.run.dir={t}/cwd/x/../..",), 2, ("hydra.run.dir: ", CWD), _user_folder, ("a",)),
    Case("run-dir-tilde", ("hydra.run.dir=~/x",), 2, ("hydra.run.dir: the character '~'", "must be inside quotes")),
    Case("output-subdir-up", ("hydra.run.dir={t}/r", "hydra.output_subdir=../x"), 2, ("hydra.output_subdir: ", BELOW)),
    Case(
        "output-subdir-abs", ("hydra.run.dir={t}/r", "hydra.output_subdir={t}/x"), 2, ("hydra.output_subdir: ", BELOW)
    ),
    Case(
        "output-subdir-dot", ("hydra.run.dir={t}/r", "hydra.output_subdir=."), 2, ("hydra.output_subdir: '.' ", BELOW)
    ),
    Case(
        "output-subdir-down-and-up",
        ("hydra.run.dir={t}/r", "hydra.output_subdir=sub/../../x"),
        2,
        ("hydra.output_subdir: ", BELOW),
    ),  # fmt: skip
    Case("sweep-subdir-up", ("-m", "seed=0,1", "hydra.sweep.dir={t}/s", "hydra.sweep.subdir=../x"), 2, (BELOW,)),
    Case("sweep-subdir-dot", ("-m", "seed=0,1", "hydra.sweep.dir={t}/s", "hydra.sweep.subdir=."), 2, (BELOW,)),
    Case("sweep-dir-dot", ("-m", "seed=0,1", "hydra.sweep.dir=."), 2, ("hydra.sweep.dir: '.' " + CWD,)),
    Case("resume-root", ("resume=/",), 2, ("resume: / holds no fedrun run",), tiny=False),
    Case("resume-dotdot", ("resume=..",), 2, ("resume: .. holds no fedrun run",), tiny=False),
    # the red team's next round
    Case(
        "output-subdir-is-the-lock",
        ("hydra.run.dir={t}/r", "hydra.output_subdir=.fedrun.lock"),
        2,
        ("hydra.output_subdir: '.fedrun.lock' is a file fedrun writes in the run dir",),
    ),  # fmt: skip  before: blamed hydra.run.dir
    Case(
        "output-subdir-under-metrics",
        ("hydra.run.dir={t}/r", "hydra.output_subdir=metrics.csv/x"),
        2,
        ("hydra.output_subdir: 'metrics.csv/x' is a file fedrun writes",),
    ),  # fmt: skip
    Case("resume-empty", ("resume=",), 2, ("resume: is empty; valid: resume=<",), tiny=False),  # before: "." named
    Case(
        "resume-moves-the-run-dir",
        ("resume={done}", "fl.rounds=2", "hydra.run.dir={t}/elsewhere"),
        2,
        ("resume: hydra.run.dir: a resumed run keeps its directory",),
        kept=("done",),
        tiny=False,
    ),  # fmt: skip  before: "hydra: unknown top-level key"
    Case(
        "resume-adds-a-hydra-key",
        ("resume={done}", "+hydra.output_subdir=../x"),
        2,
        ("resume: hydra.output_subdir: a resumed run keeps",),
        kept=("done",),
        tiny=False,
    ),  # fmt: skip
    Case("cache-dir-up-is-allowed", ("hydra.run.dir={t}/r", "cache_dir=../cache2"), 0),  # the user's choice
]


@pytest.fixture(scope="module")
def done(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return completed_run(tmp_path_factory.mktemp("traversal") / "run")


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_traversal(
    case: Case, tmp_path: Path, done: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    run_case(case, tmp_path, monkeypatch, capsys, done if "{done}" in " ".join(case.args) else None)
    assert not (tmp_path / "x").exists() and not (tmp_path / "elsewhere").exists()
