"""The site reads well at 1,280 px (issue 51, point 6): code blocks wrap instead of being cut on the right, table
headers break between words, the text column is as wide as the widest table, and ``make docs-check`` fails on an
element wider than its column (scripts/check_layout.py, in headless Chromium); each capability page shows what a
user does (commands, results) before how it is implemented and how fast."""

from __future__ import annotations

import html
import importlib.util
import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from fedrun.config.catalogue import fields_table
from tests.conftest import REPO

_spec = importlib.util.spec_from_file_location("check_layout", REPO / "scripts" / "check_layout.py")
assert _spec is not None and _spec.loader is not None
check_layout = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_layout)

CSS = (REPO / "docs" / "assets" / "stylesheets" / "fedrun.css").read_text()
MKDOCS = yaml.safe_load((REPO / "mkdocs.yml").read_text().replace("!!python", "#"))


def _rule(selector: str) -> str:
    """Every declaration the stylesheet gives ``selector`` (in a selector list or alone)."""
    found = [body for head, body in re.findall(r"([^{}]+)\{([^}]*)\}", re.sub(r"/\*.*?\*/", "", CSS, flags=re.S))
             if selector in [h.strip() for h in head.split(",")]]  # fmt: skip
    assert found, selector
    return "".join(found)


def test_the_stylesheet_wraps_code_blocks_and_keeps_header_words_whole() -> None:
    assert "white-space: pre-wrap" in _rule(".md-typeset pre > code")
    assert "white-space: nowrap" in _rule(".md-typeset th code")
    assert "word-break: normal" in _rule(".md-typeset th")
    assert "toc.integrate" in MKDOCS["theme"]["features"]  # the text column gets the right sidebar's width


def test_only_reference_tables_keep_their_defaults_on_one_line() -> None:
    """A third column elsewhere holds long test ids (docs/reliability-tables.md), which must wrap."""
    assert "white-space: nowrap" in _rule(".md-typeset .fedrun-keys td:nth-child(3) code")
    assert "md_in_html" in str(MKDOCS["markdown_extensions"])
    field = type("F", (), {"key": "a.b", "type": "int", "default": "1", "comment": "x"})
    table = fields_table((field,))  # type: ignore[arg-type]
    assert table.startswith('<div class="fedrun-keys" markdown>') and "| `a.b` | int | `1` | x |" in table


def test_the_verdict_names_each_element_wider_than_its_column(tmp_path: Path) -> None:
    bad = {"kind": "code block", "scroll": 1200, "client": 983, "text": "fedrun  privacy=client"}
    results = [
        {"page": f"file://{tmp_path}/privacy.html", "column": 983, "bad": [bad]},
        {"page": f"file://{tmp_path}/a.html", "column": 983, "bad": []},
    ]
    dom = f'<html><pre id="report">{html.escape(json.dumps(results))}</pre></html>'
    lines = check_layout.verdict(check_layout.report(dom), tmp_path)
    assert lines == ["privacy.html: code block 1200 px wide in a column of 983 px: 'fedrun privacy=client'"]
    with pytest.raises(RuntimeError, match="did not finish"):
        check_layout.report('<pre id="report">pending</pre>')


PAGE = """<!doctype html><html><head><style>%s</style></head><body><div class="md-content"><div
class="md-content__inner" style="width: 400px"><pre><code>%s</code></pre></div></div></body></html>"""


@pytest.mark.skipif(check_layout.browser() is None, reason="needs Chromium (apt-get install chromium)")
def test_chromium_measures_a_cut_code_block_and_a_wrapped_one(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    line = "fedrun " + " ".join(f"key{i}=value{i}" for i in range(30))
    (site / "cut.html").write_text(PAGE % ("pre > code { white-space: pre; display: block; overflow: auto }", line))
    (site / "wrapped.html").write_text(PAGE % ("pre > code { white-space: pre-wrap; display: block }", line))
    assert check_layout.main([str(site), str(tmp_path / "out")]) == 1
    results = check_layout.measure(check_layout.browser(), site, check_layout.pages_of(site), tmp_path / "out")
    bad = {Path(r["page"]).name: [b["kind"] for b in r["bad"]] for r in results}
    assert bad == {"cut.html": ["code block"], "wrapped.html": []}


CAPABILITY = {  # page: (a heading of results, the headings of how fast it is)
    "privacy.md": ("## Evidence: the privacy-utility table", ("## Cost",)),
    "compression.md": ("## Bytes to accuracy on Fashion-MNIST", ("## Speed",)),
    "systems.md": ("### FedBuff against FedAvg on Fashion-MNIST, on a device trace", ("### Speed",)),
}


@pytest.mark.parametrize("page", sorted(CAPABILITY))
def test_a_capability_page_shows_commands_and_results_before_its_benchmarks(page: str) -> None:
    text = (REPO / "docs" / page).read_text()
    results, benchmarks = CAPABILITY[page]
    first_heading = text.index("\n## ")
    assert "```bash" in text[:first_heading]  # the commands open the page
    for heading in benchmarks:
        assert text.index(results) < text.index(heading), (results, heading)


def test_docs_check_runs_the_layout_check() -> None:
    recipe = (REPO / "Makefile").read_text().split("\ndocs-check:", 1)[1].split("\n\n", 1)[0]
    assert "scripts/docs_screenshots.sh" in recipe and "scripts/check_layout.py" in recipe
    assert shutil.which("bash") is not None
