"""The README presents fedrun as it is (issue 51, point 4): at most 200 lines; its first screen says what fedrun
runs and gives the two commands; measurement diaries live in docs/performance.md; its printed examples are what
the commands print; the config groups it names are all of them; its ``--privacy-noise`` example says that its
form means full participation (q = 1), beside the docs' q = 0.1 form."""

from __future__ import annotations

import re
import shlex

import pytest

from fedrun.cli import help as cli_help
from fedrun.cli.privacy_query import compose_spec, noise_line
from fedrun.config.registry import ALGORITHMS, DATASETS, MODELS, PARTITIONS
from tests.conftest import REPO, main_exit_code

TEXT = (REPO / "README.md").read_text()
FIRST_SCREEN = "\n".join(TEXT.splitlines()[:30])  # a 30-line terminal


def _block_after(marker: str, lang: str) -> list[str]:
    """The lines of the first ```lang block after ``marker``."""
    rest = TEXT.split(marker, 1)[1]
    return re.search(rf"```{lang}\n(.*?)```", rest, re.S).group(1).strip().splitlines()  # type: ignore[union-attr]


def test_at_most_200_lines() -> None:
    assert len(TEXT.splitlines()) <= 200


def test_the_first_screen_says_what_fedrun_runs_and_the_two_commands() -> None:
    for words in ("papers' tables", "Personalised FL", "devices", "asynchronous servers", "Differential privacy",
                  "Compressed uploads", "More than one machine", "Ray", "make run\nmake test"):  # fmt: skip
        assert words in FIRST_SCREEN, words


def test_no_measurement_diary() -> None:
    for diary in ("load average", "niceness", "lease", "session", "sitting", "H200"):
        assert diary not in TEXT, diary


def test_the_config_groups_it_names_are_all_of_them() -> None:
    named = re.search(r"one option of each config group \((.*?)\)", TEXT, re.S)
    assert named is not None
    listed = set(re.findall(r"`([a-z]+)`", named.group(1)))
    assert listed == {g for g, _ in cli_help.GROUPS if not g.startswith("hydra/")}


def test_its_counts_are_the_registries() -> None:
    import fedrun.algorithms  # noqa: F401 - registers
    import fedrun.data.partitions  # noqa: F401
    import fedrun.data.sources  # noqa: F401
    import fedrun.models  # noqa: F401

    counts = re.search(r"\((\d+) methods, (\d+) datasets, (\d+) partitions, (\d+) models\)", TEXT)
    assert counts is not None
    want = [len(r.names()) for r in (ALGORITHMS, DATASETS, PARTITIONS, MODELS)]
    assert [int(c) for c in counts.groups()] == want


def test_the_privacy_noise_example_prints_what_it_shows_and_says_q() -> None:
    commands = [c for c in _block_after("The two noise queries", "bash") if c.startswith("fedrun --privacy-noise")]
    shown = _block_after("The two noise queries", "text")
    assert len(commands) == 2 and len(shown) == 2
    for command, line in zip(commands, shown, strict=True):
        assert noise_line(compose_spec(shlex.split(command)[2:])) == line
    assert "q=1," in shown[0] and "q=0.1," in shown[1]
    explained = TEXT.split("The two noise queries", 1)[1].split("```", 1)[0]
    assert "q = 1" in explained and "q = 0.1" in explained and "fl.participation" in explained


def test_the_bad_input_example_prints_what_it_shows(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, tmp_path
) -> None:  # noqa: ANN001
    command, line = _block_after("Bad input ends with one line", "text")
    monkeypatch.chdir(tmp_path)
    assert main_exit_code(monkeypatch, shlex.split(command.removeprefix("$ "))) == 2
    assert capsys.readouterr().err.strip() == line
    assert not (tmp_path / "outputs").exists()  # no run folder left


def test_the_sweep_example_says_which_parts_vary() -> None:
    example = TEXT.split("## A first sweep and its table", 1)[1].split("```text", 1)[0]
    assert "hash" in example and "seconds vary" in example


def test_its_runs_pass_validation_as_written() -> None:
    """Every plain ``fedrun`` line of the README passes fedrun's checks as written. The docs-commands test runs them
    with the smoke shrink (one local step), which hid a refusal at the defaults: ``system=stragglers`` with one local
    epoch (a straggler's U{1..E-1} epochs), printed as the README's example on a fresh clone."""
    lines = [shlex.split(c)[1:] for c in re.findall(r"^fedrun .*$", TEXT, re.M)]
    runs = [args for args in lines if not any(a.startswith("-") for a in args)]  # not --help, -m, --privacy-noise
    assert len(runs) >= 8
    for args in runs:
        compose_spec(args)
