"""The ``extend`` table: ``fl.rounds`` raised on a completed run continues it from its final checkpoint; lowered,
or given with a changed setting of the rounds already run, it is refused in one line and the run is left byte for
byte. The bit-for-bit checks of an extension are in tests/run/test_resume.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.hostile import Case, completed_run, ids, run_case

CATEGORY = "extend"


def _rounds(n: int) -> object:
    def after(t: Path) -> None:
        s = json.loads((t / "done" / "summary.json").read_text())
        assert s["status"] == "completed" and s["rounds_completed"] == n, s

    return after


def _drop(name: str) -> object:
    return lambda t: (t / "done" / name).unlink()


def _extend(*more: str) -> tuple[str, ...]:
    return ("resume={done}", "fl.rounds=3", *more)


DIFF = "holds a run with a different config"
CASES = [
    Case("raise-rounds", _extend(), 0, (), after=_rounds(3), tiny=False),
    Case(
        "same-rounds-skipped",
        ("resume={done}", "fl.rounds=2"),
        0,
        ("already completed; skipped",),
        kept=("done",),
        tiny=False,
    ),  # fmt: skip
    Case(
        "lower-rounds",
        ("resume={done}", "fl.rounds=1"),
        2,
        ("holds a completed run of 2 rounds; valid: fl.rounds >= 2",),
        kept=("done",),
        tiny=False,
    ),  # fmt: skip
    Case("rounds-zero", ("resume={done}", "fl.rounds=0"), 2, ("fl.rounds: must be > 0",), kept=("done",), tiny=False),
    Case("changed-lr", _extend("fl.lr=0.1"), 2, (DIFF + " (fl.lr: 0.05 -> 0.1)",), kept=("done",), tiny=False),
    Case(
        "changed-eval-every", _extend("eval.every=2"), 2, (DIFF + " (eval.every: 1 -> 2)",), kept=("done",), tiny=False
    ),  # fmt: skip
    Case(
        "no-final-checkpoint",
        _extend(),
        2,
        ("kept no final checkpoint",),
        _drop("checkpoint.pt"),
        ("done",),
        tiny=False,
    ),  # fmt: skip
    # the red team's next round
    Case(
        "rounds-negative", ("resume={done}", "fl.rounds=-1"), 2, ("fl.rounds: must be > 0",), kept=("done",), tiny=False
    ),  # fmt: skip
    Case("rounds-not-a-number", ("resume={done}", "fl.rounds=3.5"), 2, ("fl.rounds: ",), kept=("done",), tiny=False),
    Case(
        "changed-clients", _extend("fl.clients=5"), 2, (DIFF + " (fl.clients: 4 -> 5)",), kept=("done",), tiny=False
    ),  # fmt: skip
    Case("added-tag", _extend("+tags.x=1"), 2, (DIFF + " (tags.x: ",), kept=("done",), tiny=False),
    Case(
        "ima-switched-on",
        _extend("ima.enabled=true"),
        2,
        (DIFF + " (ima.enabled: False -> True",),
        kept=("done",),
        tiny=False,
    ),  # fmt: skip
    Case(
        "output-settings-may-change",
        _extend("output.plots=true", "eval.train_acc=true"),
        0,
        (),
        after=_rounds(3),
        tiny=False,
    ),  # fmt: skip
    Case(
        "keep-final-false-on-extension",
        _extend("checkpoint.keep_final=false"),
        0,
        (),
        tiny=False,
        after=lambda t: _rounds(3)(t) or (not (t / "done" / "checkpoint.pt").exists()) or pytest.fail("kept"),
    ),
]


@pytest.fixture(scope="module")
def done(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return completed_run(tmp_path_factory.mktemp("extend") / "run", "fl.rounds=2")


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_extend(
    case: Case, tmp_path: Path, done: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    run_case(case, tmp_path, monkeypatch, capsys, done)
