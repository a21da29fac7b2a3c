"""Malformed input of every kind: one line on stderr naming the field, exit code 2, no traceback, no work done.

Most cases call ``fedrun.cli.main.main`` in-process with ``sys.argv`` set (the same code path as the console
script, minus interpreter start-up); two run the real subprocess to confirm the end-to-end behaviour.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import REPO, main_exit_code

BASE = ["experiment=smoke", "output.quiet=true", "output.plots=false", "fl.rounds=1"]

# (overrides, the field the one-line error must name)
MALFORMED = [
    # wrong types, caught by the structured schema while composing
    ("fl.clients=abc", "fl.clients"),
    ("fl.rounds=1.5", "fl.rounds"),
    ("fl.rounds=", "fl.rounds"),
    ("fl.batch_size=true", "fl.batch_size"),
    ("fl.lr=[1,2]", "fl.lr"),
    ("output.plots=maybe", "output.plots"),
    ("checkpoint.every=x", "checkpoint.every"),
    ("seed=abc", "seed"),
    ("fl=oops", "fl"),
    ("fl.lr", "fl.lr"),  # not an override at all
    # wrong types inside free-form groups, caught by the registries
    ("model.hidden=abc", "model.hidden"),
    # negatives, zeros, out of range, non-finite
    ("fl.clients=-3", "fl.clients"),
    ("fl.clients=0", "fl.clients"),
    ("fl.lr=-0.1", "fl.lr"),
    ("fl.lr=inf", "fl.lr"),
    ("fl.participation=nan", "fl.participation"),
    ("fl.participation=2", "fl.participation"),
    ("fl.momentum=1.5", "fl.momentum"),
    ("fl.grad_clip=0", "fl.grad_clip"),
    ("fl.local_steps=0", "fl.local_steps"),
    ("eval.every=0", "eval.every"),
    ("eval.target=1.5", "eval.target"),
    ("hardware.threads=-2", "hardware.threads"),
    ("checkpoint.every=-1", "checkpoint.every"),
    ("model.hidden=[0]", "model.hidden"),
    ("model.dropout=1.5", "model.dropout"),
    ("partition.alpha=-1", "partition.alpha"),
    ("data.max_train_samples=-5", "data.max_train_samples"),
    ("seed=-1", "seed"),
    # huge values
    ("seed=99999999999999999999", "seed"),
    ("fl.lr_decay=1e300", "fl.lr_decay"),
    # unknown choices, unknown keys, unknown group options
    ("fl.sampling=random", "fl.sampling"),
    ("hardware.device=tpu", "hardware.device"),
    ("hardware.engine=warp", "hardware.engine"),
    ("hardware.precision=fp8", "hardware.precision"),
    ("algorithm=nope", "algorithm"),
    ("model=nope", "model"),
    ("partition=nope", "partition"),
    ("fl.bogus=1", "fl.bogus"),
    ("+fl.bogus=1", "fl.bogus"),
    ("+bogus=1", "bogus"),
    # cross-field checks
    ("fl.participation=0.01", "fl.participation"),  # 0.01 x 10 clients: nobody trains
    ("fl.clients=100000", "fl.clients"),  # more clients than training samples
    ("data=synthetic model=cnn", "model.name"),  # the model's input shape vs the dataset's
    ("corrupt.fraction=2", "corrupt.fraction"),
    ("corrupt.fraction=0.5 corrupt.labels=[0,10]", "corrupt.labels"),  # label 10 of a 10-class dataset
]


@pytest.fixture
def fedrun_main(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, tmp_path: Path) -> Callable:
    """Call ``fedrun`` in-process: returns (exit code, stderr, run dir)."""

    def _call(*overrides: str) -> tuple[int | None, str, Path]:
        run_dir = tmp_path / f"run{len(list(tmp_path.iterdir()))}"
        argv = ["fedrun", *BASE, *overrides, f"hydra.run.dir={run_dir}", f"cache_dir={tmp_path / 'cache'}"]
        code = main_exit_code(monkeypatch, argv)
        return code, capsys.readouterr().err, run_dir

    return _call


def _assert_one_line_error(code: int | None, err: str, field: str) -> None:
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("fedrun: error: ")
    assert "Traceback" not in err
    assert re.search(rf"(?<![\w.]){re.escape(field)}\b", lines[0]), f"{field!r} not named in: {lines[0]}"


@pytest.mark.parametrize(("overrides", "field"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_override_is_one_clean_line(fedrun_main: Callable, overrides: str, field: str) -> None:
    code, err, run_dir = fedrun_main(*overrides.split())
    _assert_one_line_error(code, err, field)
    # nothing was trained: the run dir (if Hydra made one) holds only the error
    if run_dir.exists():
        assert sorted(p.name for p in run_dir.iterdir() if p.name != ".hydra") == ["error.txt"]


def test_unknown_choices_are_listed(fedrun_main: Callable) -> None:
    _, err, _ = fedrun_main("algorithm=nope")
    assert "valid: " in err and "fedavg" in err and "fedprox" in err
    _, err, _ = fedrun_main("fl.sampling=random")
    assert "valid: fixed, bernoulli" in err


def test_console_script_end_to_end(run_cli: Callable, tmp_path: Path) -> None:
    res = run_cli(*BASE, "fl.lr=-1")
    _assert_one_line_error(res.returncode, res.stderr, "fl.lr")
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [".hydra", "error.txt"]


def test_target_keys_are_never_instantiated(fedrun_main: Callable, tmp_path: Path) -> None:
    sentinel = tmp_path / "sentinel"
    sentinel.write_text("still here")
    for group in ("data", "model", "algorithm", "partition", "hardware"):
        code, err, _ = fedrun_main(f"+{group}._target_=os.remove", f"+{group}.path={sentinel}")
        _assert_one_line_error(code, err, f"{group}._target_")
    assert sentinel.read_text() == "still here"
    # and nothing in fedrun hands a config to Hydra's instantiate()
    sources = [p.read_text() for p in (REPO / "fedrun").rglob("*.py")]
    assert not any(re.search(r"\binstantiate\s*\(", s) for s in sources)
