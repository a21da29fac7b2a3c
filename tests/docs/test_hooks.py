"""docs/hooks.py: the README is the site's home page, and generated indexes expand in the nav."""

from __future__ import annotations

import importlib.util
import re

import pytest

from tests.conftest import REPO

pytest.importorskip("mkdocs")  # the docs extra: docs/hooks.py imports it
_spec = importlib.util.spec_from_file_location("docs_hooks", REPO / "docs" / "hooks.py")
assert _spec is not None and _spec.loader is not None
hooks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hooks)


def test_the_readmes_links_into_docs_become_site_links() -> None:
    assert hooks.readme_as_home("see [x](docs/reproduction.md#a) and [y](https://e.org/docs/z)") == (
        "see [x](reproduction.md#a) and [y](https://e.org/docs/z)"
    )


def test_a_generated_index_in_the_nav_gets_the_pages_beside_it() -> None:
    pages = {"reference/methods/index.md": "", "reference/methods/b.md": "", "reference/methods/a.md": "", "x.md": ""}
    nav = [{"Home": "index.md"}, {"Reference": [{"Methods": "reference/methods/index.md"}, {"X": "x.md"}]}]
    assert hooks.expand_nav(nav, pages) == [
        {"Home": "index.md"},
        {
            "Reference": [
                {"Methods": ["reference/methods/index.md", "reference/methods/a.md", "reference/methods/b.md"]},
                {"X": "x.md"},
            ]
        },
    ]


def test_no_generated_page_is_also_a_file_in_docs(generated_pages: dict[str, str]) -> None:
    on_disk = {str(p.relative_to(REPO / "docs")) for p in (REPO / "docs").rglob("*.md")}
    assert not on_disk & {*generated_pages, "index.md"}


def test_make_docs_builds_the_site_strict_and_ci_runs_it_after_lint() -> None:
    make = (REPO / "Makefile").read_text()
    recipe = re.search(r"^docs:.*\n((?:\t.*\n)+)", make, re.M)
    assert recipe is not None and "mkdocs build --strict" in recipe.group(1)
    assert "'.[dev,tracking,mlflow,wandb,dist,tune,docs,privacy]'" in make
    ci = (REPO / ".ci/run").read_text().splitlines()
    assert ci.index("make docs") == ci.index("make lint") + 1
    tomllib = pytest.importorskip("tomllib")
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert {d.split(">")[0] for d in extras["docs"]} == {"mkdocs", "mkdocs-material"}
    assert "site/" in (REPO / ".gitignore").read_text().splitlines()
