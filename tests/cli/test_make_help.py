"""``make help`` lists every Make target with its one-line doc (the last unindented ``## `` line above it), and the
pattern rules ``reproduce-%`` / ``reproduce-%-smoke`` as the paper targets they run, each by name (issue 33,
point 8: it printed ``reproduce-%``, which a newcomer cannot type)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from fedrun.papers.targets import TARGETS
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
    papers = {f"reproduce-{t.name}{tail}" for t in TARGETS for tail in ("", "-smoke")}
    plain = {t for t in _targets() if "%" not in t}
    assert {"reproduce-%", "reproduce-%-smoke"} <= set(_targets())  # the rules the paper targets run
    assert set(listed) == plain | papers, out
    assert "%" not in out and "$$" not in out
    assert all(len(doc) > 10 for doc in listed.values())
    # make help prints a doc's first line only: it must end where a phrase does (issue 51: compression-evidence's
    # ended "... MLP, once per")
    dangling = {"a", "an", "and", "as", "at", "by", "for", "from", "in", "of", "on", "or", "per", "the", "to", "with"}
    cut = {name: doc for name, doc in listed.items() if doc.rstrip(" ,:;").split()[-1].lower() in dangling}
    assert not cut and not [doc for doc in listed.values() if doc.rstrip().endswith((",", ":", ";"))], cut
    assert listed["reproduce-fedlaw-table3"].startswith("FedLAW Table 3: its")
    assert listed["reproduce-fedlaw-table3-smoke"].startswith("the same sweep shrunk")
    assert listed["reproduce-fedsam-appf"].startswith("FedSAM App. F")


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_a_listed_paper_target_is_one_make_runs() -> None:
    """The names make help prints resolve to the reproduce-% rules (make -n: the command, nothing run)."""
    out = subprocess.run(
        ["make", "-n", "reproduce-fedlaw-table3-smoke"], cwd=REPO, capture_output=True, text=True, timeout=60
    ).stdout
    assert "fedrun-reproduce run fedlaw-table3 --smoke" in out
