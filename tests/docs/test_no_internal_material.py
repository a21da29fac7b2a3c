"""User docs hold no internal material (issue 51, point 5): no absolute path of a developer's machine or of a work
queue in a page or an evidence record, and a record's note about uncommitted changes says what it means for its
numbers. (The raw logs under docs/assets/ are measurements kept byte for byte, paths of the machine that ran them
included: docs/performance.md says so where it links them.)"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from fedrun.papers.record import UNCOMMITTED
from tests.conftest import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
RECORDS = sorted(
    [*(REPO / "fedrun" / "papers" / "evidence").glob("*.json"), *(REPO / "docs" / "evidence").glob("*.json")]
)
# a developer's machine: its checkouts and queues (/work/main, /work/evruns/...), a real home or root's; /home/me is
# the docs' example user
INTERNAL = re.compile(r"/work/|\bevruns\b|lane\.txt|/root/|/home/(?!me/)\w+")


@pytest.mark.parametrize("path", PAGES + RECORDS, ids=lambda p: str(p.relative_to(REPO)))
def test_no_developer_path(path: Path) -> None:
    found = [m.group(0) for m in INTERNAL.finditer(path.read_text())]
    assert not found, found


def test_an_uncommitted_changes_note_says_what_it_means_for_the_numbers() -> None:
    assert "numbers" in UNCOMMITTED  # what build_record writes
    for path in RECORDS:
        record = json.loads(path.read_text())
        for key in ("commit_note", "note"):
            text = str(record.get(key, ""))
            if "uncommitted" in text:
                assert "numbers" in text or "no file under fedrun/" in text, (path.name, key, text)
