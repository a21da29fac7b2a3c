"""A missing optional extra is one line naming the setting and the ``pip install`` that adds it."""

from __future__ import annotations

import pickle
import sys

import pytest

from fedrun.core.errors import ConfigError
from fedrun.core.extras import MissingExtra, has_module, require_extra


def test_require_extra_imports_an_installed_module() -> None:
    assert require_extra("json", "none", "x") is sys.modules["json"]


def test_a_hidden_module_is_one_line_naming_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "json", None)
    assert not has_module("json")
    with pytest.raises(ConfigError) as info:
        require_extra("json", "tracking", "tracking.json")
    line = "tracking.json: needs the json package, not installed here; pip install 'fedrun[tracking]'"
    assert str(info.value) == line
    assert "\n" not in str(info.value)


def test_missing_extra_crosses_processes() -> None:
    e = pickle.loads(pickle.dumps(MissingExtra("hardware.engine", "ray", "dist")))
    assert (type(e), str(e)) == (MissingExtra, str(MissingExtra("hardware.engine", "ray", "dist")))


def test_has_module_of_a_missing_parent_package() -> None:
    assert not has_module("no_such_package_fedrun.sub")
