"""The ``foreign-files`` table (issue 32): a run dir someone else wrote never runs code. Its ``config.yaml`` may
name modules in ``imports`` and put them beside it (in the folder the user resumes from), or name a module of
the standard library with a side effect; ``fedrun resume=DIR`` and ``fedrun-report landscape DIR`` import none
of them, whether the resume then runs, is skipped or is refused. A module the user names on the command line
is imported, and the current directory stays off ``sys.path``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from fedrun.cli.report import main as report_main
from tests.hostile import Case, completed_run, ids, run_case

CATEGORY = "foreign-files"
WRITES = "from pathlib import Path\nPath({marker!r}).write_text('imported')\n"


def _marker(t: Path) -> Path:
    return t / "imported.txt"


def _foreign(modules: list[str], plant: str = "", config: dict | None = None, unfinished: bool = False) -> object:
    """A run dir whose config.yaml names ``modules`` in ``imports`` (and ``config``'s keys), with ``plant`` (a
    module file or ``pkg/`` package that writes the marker) in the folder the command runs from."""

    def setup(t: Path) -> None:
        cfg_file = t / "done" / "config.yaml"
        cfg = yaml.safe_load(cfg_file.read_text())
        cfg["imports"] = modules
        for key, value in (config or {}).items():
            cfg[key.split(".")[0]][key.split(".")[1]] = value
        cfg_file.write_text(yaml.safe_dump(cfg))
        code = WRITES.format(marker=str(_marker(t)))
        if plant.endswith("/"):
            (t / "cwd" / plant).mkdir()
            (t / "cwd" / plant / "__init__.py").write_text(code)
            (t / "cwd" / plant / "sub.py").write_text(code)
        elif plant:
            (t / "cwd" / plant).write_text(code)
        if unfinished:
            (t / "done" / "summary.json").unlink()

    return setup


def _nothing_imported(*modules: str) -> object:
    def after(t: Path) -> None:
        assert not _marker(t).exists(), "a module the run dir named was imported"
        for m in modules:
            assert m not in sys.modules, f"{m} was imported"

    return after


def _named_import_only(t: Path) -> None:
    assert _marker(t).read_text() == "imported"  # the user named it: imported
    assert str(t / "cwd") not in sys.path and "" not in sys.path[1:], "the current directory was put on sys.path"


NOTHING = _nothing_imported()
CASES = [
    Case(
        "beside-completed", ("resume={done}",), 0, ("already completed",), _foreign(["ff_a"], "ff_a.py"),
        after=_nothing_imported("ff_a"), tiny=False,
    ),
    Case(
        "beside-unfinished", ("resume={done}",), 0, (), _foreign(["ff_b"], "ff_b.py", unfinished=True),
        after=_nothing_imported("ff_b"), tiny=False,
    ),
    Case(
        "beside-extended", ("resume={done}", "fl.rounds=2"), 0, (), _foreign(["ff_c"], "ff_c.py"),
        after=_nothing_imported("ff_c"), tiny=False,
    ),
    Case(
        "beside-refused-changed-seed", ("resume={done}", "seed=3"), 2, ("different config (seed: 0 -> 3)",),
        _foreign(["ff_d"], "ff_d.py"), after=_nothing_imported("ff_d"), tiny=False,
    ),
    Case(
        "beside-refused-bad-config", ("resume={done}",), 2,
        ("algorithm.name", "imports [ff_e] were not imported", "imports=[ff_e]"),
        _foreign(["ff_e"], "ff_e.py", config={"algorithm.name": "ff_method"}), after=_nothing_imported("ff_e"),
        tiny=False,
    ),
    Case(
        "beside-package", ("resume={done}",), 0, (), _foreign(["ff_pkg.sub"], "ff_pkg/"),
        after=_nothing_imported("ff_pkg"), tiny=False,
    ),
    Case(
        "stdlib-this", ("resume={done}",), 0, (), _foreign(["this"]), after=_nothing_imported("this"), tiny=False
    ),
    Case(
        "stdlib-refused", ("resume={done}", "seed=3"), 2, ("different config",), _foreign(["__hello__"]),
        after=_nothing_imported("__hello__"), tiny=False,
    ),
    Case(
        "named-import-leaves-sys-path", ("imports=[ff_named]", "hydra.run.dir={t}/new"), 0, (),
        _foreign([], "ff_named.py"), after=_named_import_only,
    ),
]  # fmt: skip


@pytest.fixture(scope="module")
def done(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return completed_run(tmp_path_factory.mktemp("foreign") / "run")


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_foreign_files(
    case: Case, done: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))  # a defect here would leave the cwd there for later tests
    run_case(case, tmp_path, monkeypatch, capsys, done)


def test_a_report_on_a_foreign_run_dir_imports_nothing(
    done: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """``fedrun-report landscape`` rebuilds the run's model from its config.yaml: it imports none of its modules."""
    import shutil

    monkeypatch.setattr(sys, "path", list(sys.path))
    (tmp_path / "cwd").mkdir()
    shutil.copytree(done, tmp_path / "done")
    _foreign(["ff_report"], "ff_report.py")(tmp_path)
    monkeypatch.chdir(tmp_path / "cwd")
    out = tmp_path / "plot.png"
    args = ["landscape", str(tmp_path / "done"), "--max-samples", "20", "--points", "2", "--out", str(out)]
    report_main(args)
    capsys.readouterr()
    assert not _marker(tmp_path).exists() and "ff_report" not in sys.modules
