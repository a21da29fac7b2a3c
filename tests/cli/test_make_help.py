"""``make help`` lists every Make target with its one-line doc (the last unindented ``## `` line above it)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from tests.conftest import REPO


def _targets() -> list[str]:
    text = (REPO / "Makefile").read_text()
    return [m.group(1) for m in re.finditer(r"^([a-zA-Z0-9%_.-]+):(?!=)", text, re.M) if m.group(1) != ".PHONY"]


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_help_lists_every_target_with_its_doc() -> None:
    out = subprocess.run(
        ["make", "-s", "help"], cwd=REPO, capture_output=True, text=True, timeout=60, check=True
    ).stdout
    listed = {line.split()[0]: line.split(None, 1)[1] for line in out.splitlines() if line.strip()}
    assert set(_targets()) == set(listed), out
    assert all(len(doc) > 10 for doc in listed.values())
    assert listed["reproduce-%-smoke"].startswith("A target's sweep shrunk")
    assert "$$" not in out
