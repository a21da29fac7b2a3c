"""docs/reliability-tables.md lists every hostile-input category with its table and its number of cases: this test
reads each table's ``CATEGORY`` and ``CASES`` and fails when the page differs (a case added, a table moved)."""

from __future__ import annotations

import importlib
import re

from tests.conftest import REPO

PAGE = REPO / "docs" / "reliability-tables.md"
# the red team's categories (issue 22), in the page's order
CATEGORIES = (
    "traversal", "symlink", "resume", "report", "yaml-bomb", "lock", "sweep-signal", "extend", "proxy",
    "zero-client", "names", "limits", "numeric", "data-keys", "concurrency", "foreign-files", "trackers",
    "resources", "world-inputs", "trace", "changed-inputs", "capability-input", "privacy-budget",
)  # fmt: skip
ROW = re.compile(r"^\| `([a-z-]+)` \| [^|]+ \| `(tests/[\w/]+\.py)::(\w+)`.*\| (\d+) \|$")


def _rows() -> dict[str, tuple[str, str, int]]:
    rows = {}
    for line in PAGE.read_text().splitlines():
        m = ROW.match(line)
        if m:
            rows[m.group(1)] = (m.group(2), m.group(3), int(m.group(4)))
    return rows


def test_the_page_lists_every_category_once_in_order() -> None:
    assert tuple(_rows()) == CATEGORIES


def test_the_page_counts_are_the_tables_counts() -> None:
    for category, (path, function, count) in _rows().items():
        module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
        assert module.CATEGORY == category, path
        assert hasattr(module, function), f"{path}::{function}"
        ids = [repr(c) for c in module.CASES]
        assert len(set(ids)) == len(ids), f"{category}: a case is listed twice"
        assert len(module.CASES) == count, f"{category}: the page says {count} cases, {path} has {len(module.CASES)}"
        assert len(module.CASES) >= 9, f"{category}: fewer cases than the red team's round needs"
