"""fedrun/config/imports.py: only the modules the command named are imported, and the current directory is
never put on ``sys.path``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from fedrun.config.imports import load_imports
from fedrun.core.errors import ConfigError


@pytest.fixture
def cwd_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "fence_mod.py").write_text("VALUE = 1\n")
    (tmp_path / "fence_pkg").mkdir()
    (tmp_path / "fence_pkg" / "__init__.py").write_text("")
    (tmp_path / "fence_pkg" / "algo.py").write_text("from fence_pkg import helper\nVALUE = helper.VALUE\n")
    (tmp_path / "fence_pkg" / "helper.py").write_text("VALUE = 2\n")
    yield tmp_path
    for name in ("fence_mod", "fence_pkg", "fence_pkg.algo", "fence_pkg.helper"):
        sys.modules.pop(name, None)


def test_a_named_module_is_found_in_the_current_directory_without_putting_it_on_sys_path(cwd_module: Path) -> None:
    before = list(sys.path)
    assert load_imports(["fence_mod", "fence_pkg.algo"], named=["fence_mod", "fence_pkg.algo"]) == []
    assert sys.modules["fence_mod"].VALUE == 1 and sys.modules["fence_pkg.algo"].VALUE == 2
    assert sys.path == before


def test_a_module_the_command_did_not_name_is_not_imported(cwd_module: Path) -> None:
    assert load_imports(["fence_mod", "this"], named=[]) == ["fence_mod", "this"]
    assert "fence_mod" not in sys.modules


def test_a_named_module_that_fails_to_import_is_one_line_naming_it(cwd_module: Path) -> None:
    (cwd_module / "fence_bad.py").write_text("raise RuntimeError('boom')\n")
    with pytest.raises(ConfigError, match=r"imports\[0\]: cannot import 'fence_bad': RuntimeError: boom"):
        load_imports(["fence_bad"], named=["fence_bad"])
    assert "fence_bad" not in sys.modules


def test_names_are_still_checked_when_not_imported() -> None:
    with pytest.raises(ConfigError, match=r"imports\[0\]"):
        load_imports(["../evil"], named=[])
    with pytest.raises(ConfigError, match="imports: expected a list"):
        load_imports("abc", named=[])
