"""The quality gates are one set of commands: `make lint` runs ruff, `ruff format --check` and mypy, CI runs
`make lint`, and .pre-commit-config.yaml runs the same three; mypy checks core/, host/, storage/, config/, run/
and algorithms/base.py with every flag of ``--strict``."""

from __future__ import annotations

import re

import pytest
import yaml

from tests.conftest import REPO

GATES = ("ruff check fedrun tests scripts", "ruff format --check fedrun tests scripts", "mypy")
STRICT = (  # `mypy --strict`'s flags that a per-module section can set
    "disallow_any_generics", "disallow_subclassing_any", "disallow_untyped_calls", "disallow_untyped_defs",
    "disallow_incomplete_defs", "check_untyped_defs", "disallow_untyped_decorators", "warn_unused_ignores",
    "warn_return_any", "no_implicit_reexport", "strict_equality", "extra_checks",
)  # fmt: skip


def test_make_lint_ci_and_pre_commit_run_the_same_gates() -> None:
    recipe = re.search(r"^lint:.*\n((?:\t.*\n)+)", (REPO / "Makefile").read_text(), re.M)
    assert recipe is not None
    assert [line.strip().removeprefix("$(BIN)/") for line in recipe.group(1).splitlines()] == list(GATES)
    assert "make lint" in (REPO / ".ci/run").read_text().splitlines()
    hooks = yaml.safe_load((REPO / ".pre-commit-config.yaml").read_text())["repos"]
    assert [h["entry"].removeprefix(".venv/bin/") for repo in hooks for h in repo["hooks"]] == list(GATES)
    assert all(repo["repo"] == "local" for repo in hooks)  # nothing fetched


def test_mypy_is_declared_and_strict_on_the_bottom_layers() -> None:
    tomllib = pytest.importorskip("tomllib")
    cfg = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert any(dep.startswith("mypy") for dep in cfg["project"]["optional-dependencies"]["dev"])
    mypy = cfg["tool"]["mypy"]
    assert mypy["packages"] == ["fedrun"] and "strict" not in mypy  # the whole package, non-strict baseline
    layers = {
        "fedrun.core.*",
        "fedrun.host.*",
        "fedrun.storage.*",
        "fedrun.config.*",
        "fedrun.run.*",
        "fedrun.algorithms.base",
    }
    strict = [o for o in mypy["overrides"] if layers <= set(o["module"])]
    assert len(strict) == 1 and all(strict[0].get(flag) is True for flag in STRICT)
    assert "strict" not in strict[0]  # mypy applies an override's `strict` to every module


# ---- sizes: small modules with one job each (issue 31) -------------------------------------------------------------
FUNCTION_LINES = 60  # no function in fedrun/ over this many lines (its decorators excluded, its docstring included)
CLI_MODULE_LINES = 400  # no module of fedrun/cli/ over this many lines


def _long_functions() -> set[str]:
    import ast

    found = set()
    for path in sorted((REPO / "fedrun").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno is not None:
                if node.end_lineno - node.lineno + 1 > FUNCTION_LINES:
                    found.add(f"{path.relative_to(REPO)}::{node.name}")
    return found


def test_no_function_in_fedrun_is_over_60_lines() -> None:
    assert _long_functions() == set()


def test_no_cli_module_is_over_400_lines() -> None:
    sizes = {p.name: len(p.read_text().splitlines()) for p in (REPO / "fedrun" / "cli").glob("*.py")}
    assert {name: n for name, n in sizes.items() if n > CLI_MODULE_LINES} == {}
