"""docs/hooks.py: the README is the site's home page, and generated indexes expand in the nav."""

from __future__ import annotations

import importlib.util

from tests.conftest import REPO

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


def test_no_generated_page_is_also_a_file_in_docs() -> None:
    from fedrun.papers.reproduction import doc_pages

    on_disk = {str(p.relative_to(REPO / "docs")) for p in (REPO / "docs").rglob("*.md")}
    assert not on_disk & {*doc_pages(), "index.md"}
