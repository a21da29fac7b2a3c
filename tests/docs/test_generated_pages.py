"""The generated pages read for a newcomer (issue 33, point 8): the measured-cells page opens with an overview of
every cell and names each paper table once in its table of contents; the reference tables keep key names whole."""

from __future__ import annotations

import re

import yaml

from fedrun.papers import reproduction
from fedrun.papers.scorecard import load_evidence
from tests.conftest import REPO


def _headings(page: str, level: str) -> list[str]:
    return [re.sub(r"\s*\{[^}]*\}$", "", line) for line in page.splitlines() if line.startswith(level + " ")]


def test_measured_cells_open_with_an_overview_of_every_cell(generated_pages: dict[str, str]) -> None:
    records = load_evidence()
    page = generated_pages[reproduction.PAGE]  # = reproduction.reproduction_page(records)
    overview = page.split("## All cells", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in overview.splitlines() if line.startswith("| [")]
    assert len(rows) == sum(len(r["cells"]) for r in records), overview[:2000]
    for rec in records:
        for cell in rec["cells"]:
            assert any(f"| {cell['row']} | {cell['column']} |" in r for r in rows), cell
    assert page.index("## All cells") < page.index(f"`{records[0]['preset']}`", page.index("## All cells") + 1)


def test_measured_cells_name_each_table_once_in_the_contents(generated_pages: dict[str, str]) -> None:
    page = generated_pages[reproduction.PAGE]
    h2 = _headings(page, "##")
    assert len(h2) == len(set(h2)), [h for h in h2 if h2.count(h) > 1]
    h3 = _headings(page, "###")
    assert len(h3) == len(set(h3)), [h for h in h3 if h3.count(h) > 1]
    ids = re.findall(r"\{ #([\w-]+) \}", page)
    for target in re.findall(r"\]\(#([\w-]+)\)", page):  # the overview's links land on a heading of the page
        assert target in ids, target


def test_reference_tables_keep_key_names_whole() -> None:
    """Material breaks inline code anywhere in a narrow table column ("algorithm.server_l / r"); the site's
    stylesheet keeps a reference table's key column on one line per key."""
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text().replace("!!python", "#"))
    sheets = config.get("extra_css", [])
    assert sheets, "mkdocs.yml: no extra_css"
    css = "".join((REPO / "docs" / s).read_text() for s in sheets)
    rule = re.search(r"td:first-child code\s*\{([^}]*)\}", css)
    assert rule and "white-space: nowrap" in rule.group(1), css
