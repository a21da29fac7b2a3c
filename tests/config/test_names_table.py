"""The ``names`` table: hostile names in overrides, tags and run dirs (unicode, ``;``, newlines, very long, ``=``,
quotes) are refused in one line naming the key and saying how to write it, or kept exactly as given."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.hostile import Case, ids, run_case

CATEGORY = "names"
QUOTES = "must be inside quotes"
LONG = "x" * 300


def _tag(value: object) -> object:
    def after(t: Path) -> None:
        cfg = yaml.safe_load((t / "r" / "config.yaml").read_text())
        assert cfg["tags"]["m"] == value, cfg["tags"]

    return after


def _r(*args: str) -> tuple[str, ...]:
    return (*args, "hydra.run.dir={t}/r")


CASES = [
    Case("run-dir-umlaut", ("hydra.run.dir={t}/rün",), 2, ("hydra.run.dir: the character 'ü'", QUOTES)),
    Case("run-dir-semicolon", ("hydra.run.dir={t}/a;b",), 2, ("hydra.run.dir: the character ';'", QUOTES)),
    Case("run-dir-quoted-unicode", ('hydra.run.dir="{t}/日本;1"',), 0),
    Case("tag-semicolon-unquoted", _r("+tags.m=a;b"), 2, ("tags.m: the character ';'", QUOTES)),
    Case("tag-semicolon-quoted", _r('+tags.m="a;b"'), 0, after=_tag("a;b")),
    Case("tag-equals", _r('+tags.m="a=b"'), 0, after=_tag("a=b")),
    Case("tag-unicode", _r('+tags.m="日本"'), 0, after=_tag("日本")),
    Case("tag-newline", _r('+tags.m="a\nb"'), 0, after=_tag("a\nb")),
    Case("tag-very-long", _r("+tags.m=" + "y" * 5000), 0, after=_tag("y" * 5000)),
    Case("name-override-refused", _r("algorithm.name=fedprox"), 2, ("algorithm.name: is set by the algorithm option",)),
    # the red team's next round
    Case("tag-key-unicode", _r("+tags.日本=1"), 2, ("the key 'tags.日本' holds '日'",)),  # before: "character '.'"
    Case("tag-key-semicolon", _r("+tags.a;b=1"), 2, ("the key 'tags.a;b' holds ';'",)),  # before: quote the value
    Case(
        "run-dir-name-too-long",
        ("hydra.run.dir={t}/" + LONG,),
        2,
        ("hydra.run.dir: a folder name of 300 bytes", "at most 255 bytes"),
    ),  # fmt: skip  before: "[Errno 36] File name too long" naming no key
    Case("tag-quotes-inside", _r("+tags.m='it\"s'"), 0, after=_tag('it"s')),
    Case(
        "job-name-with-dots-stays-inside",
        _r("hydra.job.name=../../evil"),
        0,
        after=lambda t: (not (t / "evil").exists()) or pytest.fail("escaped"),
    ),  # fmt: skip
    Case("tag-interpolation-of-env", _r("+tags.m=${{oc.env:FEDRUN_NAMES_UNSET}}"), 2, ("tags.m",)),
]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_names(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    monkeypatch.delenv("FEDRUN_NAMES_UNSET", raising=False)
    run_case(case, tmp_path, monkeypatch, capsys)
    if case.code == 2:
        assert not [p for p in tmp_path.iterdir() if p.name not in ("cwd", "r")]
