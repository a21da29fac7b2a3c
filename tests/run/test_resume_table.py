"""The ``resume`` table: bad ``resume=`` targets (missing, not a run, a completed run, a mistyped dir, damaged
files, changed settings) end in one line naming what is wrong, and leave the directory as it was."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.hostile import Case, completed_run, ids, run_case

CATEGORY = "resume"


def _write(name: str, text: str | bytes, drop: tuple[str, ...] = ()) -> object:
    def setup(t: Path) -> None:
        for d in drop:
            (t / "done" / d).unlink()
        p = t / "done" / name
        p.write_bytes(text) if isinstance(text, bytes) else p.write_text(text)

    return setup


def _user_folder(t: Path) -> None:
    (t / "mine").mkdir()
    (t / "mine" / "notes.txt").write_text("mine\n")


def _truncate_checkpoint(t: Path) -> None:
    (t / "done" / "summary.json").unlink()  # unfinished: a resume reads the checkpoint
    ck = t / "done" / "checkpoint.pt"
    ck.write_bytes(ck.read_bytes()[:100])


def _empty(t: Path) -> None:
    (t / "empty").mkdir()


def _a_file(t: Path) -> None:
    (t / "afile").write_text("x")


NO_RUN = "holds no fedrun run (no config.yaml)"
CASES = [
    Case("missing-dir", ("resume={t}/nope",), 2, (f"resume: {{t}}/nope {NO_RUN}",), tiny=False),
    Case("mistyped-dir", ("resume={t}/dnoe",), 2, (f"resume: {{t}}/dnoe {NO_RUN}",), kept=("done",), tiny=False),
    Case("a-file", ("resume={t}/afile",), 2, (NO_RUN,), _a_file, ("afile",), tiny=False),
    Case("empty-dir", ("resume={t}/empty",), 2, (NO_RUN,), _empty, ("empty",), tiny=False),
    Case("user-folder", ("resume={t}/mine",), 2, (NO_RUN,), _user_folder, ("mine",), tiny=False),
    Case("completed-is-skipped", ("resume={done}",), 0, ("already completed; skipped",), tiny=False),
    Case(
        "config-not-yaml", ("resume={done}",), 2, ("resume: ",), _write("config.yaml", "a: [1\n"), ("done",), tiny=False
    ),
    Case(
        "config-a-list",
        ("resume={done}",),
        2,
        ("resume: {t}/done/config.yaml is not a fedrun config",),
        _write("config.yaml", "- a\n- b\n"),
        ("done",),
        tiny=False,
    ),  # fmt: skip  before: "Cannot merge DictConfig"
    Case(
        "truncated-checkpoint",
        ("resume={done}",),
        2,
        ("{t}/done/checkpoint.pt: unreadable checkpoint",),
        _truncate_checkpoint,
        ("done",),
        tiny=False,
    ),  # fmt: skip
    Case(
        "changed-seed", ("resume={done}", "seed=3"), 2, ("different config (seed: 0 -> 3)",), kept=("done",), tiny=False
    ),  # fmt: skip
    Case(
        "switched-algorithm",
        ("resume={done}", "algorithm=fedprox"),
        2,
        ("resume: algorithm: the run's algorithm cannot be switched",),
        kept=("done",),
        tiny=False,
    ),  # fmt: skip
    Case(
        "a-sweep", ("-m", "resume={done}", "fl.rounds=2,3"), 2, ("resume: resumes one run",), kept=("done",), tiny=False
    ),  # fmt: skip
    Case(
        "deleted-key", ("resume={done}", "~fl.lr"), 2, ("resume: fl.lr: cannot be deleted",), kept=("done",), tiny=False
    ),  # fmt: skip
    Case(
        "added-unknown-key", ("resume={done}", "+fl.bogus=1"), 2, ("fl.bogus: unknown key",), kept=("done",), tiny=False
    ),  # fmt: skip
    # the red team's next round
    Case(
        "config-a-string",
        ("resume={done}",),
        2,
        ("is not a fedrun config",),
        _write("config.yaml", "just text\n"),
        ("done",),
        tiny=False,
    ),  # fmt: skip
    Case(
        "config-without-algorithm",
        ("resume={done}",),
        2,
        ("is not a fedrun config",),
        _write("config.yaml", "seed: 0\nfl:\n  rounds: 1\n"),
        ("done",),
        tiny=False,
    ),  # fmt: skip
    Case(
        "summary-not-json-resumes",
        ("resume={done}",),
        0,
        (),
        _write("summary.json", "{"),
        tiny=False,
        after=lambda t: '"status": "completed"' in (t / "done" / "summary.json").read_text() or pytest.fail("x"),
    ),  # fmt: skip
    Case(
        "metrics-header-only-resumes",
        ("resume={done}",),
        0,
        (),
        _write("metrics.csv", "round,test_acc\n", ("summary.json",)),
        tiny=False,
    ),  # fmt: skip  rows come back from the checkpoint
    Case(
        "resume-given-twice-takes-the-last", ("resume={t}/nope", "resume={done}"), 0, ("already completed",), tiny=False
    ),  # fmt: skip
    Case(
        "type-error-in-override", ("resume={done}", "fl.rounds=abc"), 2, ("fl.rounds: ",), kept=("done",), tiny=False
    ),  # fmt: skip
]


@pytest.fixture(scope="module")
def done(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return completed_run(tmp_path_factory.mktemp("resume") / "run")


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_resume(
    case: Case, tmp_path: Path, done: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    run_case(case, tmp_path, monkeypatch, capsys, done)
