"""What the Makefile's recipes tell a newcomer (``make help`` itself: tests/cli/test_make_help.py)."""

import re

from tests.conftest import REPO


def _recipe(target: str) -> str:
    return (REPO / "Makefile").read_text().split(f"\n{target}:", 1)[1].split("\n\n", 1)[0]


def test_make_run_ends_saying_how_to_call_fedrun():
    recipe = _recipe("run")
    assert "activate" in recipe.splitlines()[-1] and "$(BIN)/fedrun" in recipe.splitlines()[-1]


def test_the_readme_says_how_to_call_fedrun_before_its_first_command():
    first_run = (REPO / "README.md").read_text().split("## A first run", 1)[1]
    assert first_run.index("source .venv/bin/activate") < first_run.index("fedrun experiment=smoke")


def _paragraphs(page: str = "README.md") -> list[str]:
    """The page's paragraphs (the README's measurement diaries moved to docs/performance.md, issue 51)."""
    return [p for p in (REPO / page).read_text().split("\n\n") if p.strip()]


def test_the_readme_leads_with_what_a_researcher_does():
    """Issue 33, point 9: the opening shows a command before it speaks of cells and evidence records, and each term
    is explained where it first appears (its emphasised definition)."""
    text = (REPO / "README.md").read_text()
    opening = "\n\n".join(_paragraphs()[:2])
    assert "fedrun algorithm=" in opening and "cell" not in opening and "evidence" not in opening
    for term, used in (("cell", r"\b(paper|measured) cells?\b"), ("evidence record", r"\bevidence records?\b")):
        first = re.search(used, text)
        assert first is not None and text.index(f"*{term}*") < first.start(), term


def test_the_readmes_timings_stand_apart_from_engines_and_test_counts():
    """The timing paragraph of make run is about make run: the engine choice (float tolerance) and the test
    suite's counts are paragraphs of their own."""
    timing = next(p for p in _paragraphs("docs/performance.md") if "`time make run` took" in p)
    assert "tolerance" not in timing and "passed" not in timing and "engine" not in timing


def test_the_readme_names_every_root_only_skip():
    """A test skipped when run as root (the README's set-up runs as root) is named where the README counts skips."""
    root_only = [
        p.relative_to(REPO).as_posix()
        for p in (REPO / "tests").rglob("test_*.py")
        if re.search(r"skip\w*\(\s*os\.geteuid\(\) == 0", p.read_text())
    ]
    counts = next(p for p in _paragraphs("docs/performance.md") if " skipped" in p and "passed" in p)
    assert root_only and all(path in counts for path in root_only), (root_only, counts)
