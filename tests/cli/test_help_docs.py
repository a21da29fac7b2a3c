"""``fedrun --help`` shows each option's doc as whole phrases (issue 33, point 8): a header comment's first sentence,
its wrapped lines joined, never the first line cut mid-phrase ("... FedDF with teachers = FedAvg model +")."""

from __future__ import annotations

import pytest

from fedrun.cli import help as cli_help
from fedrun.config import location
from fedrun.config.catalogue import yaml_comments

YAMLS = sorted(p for group, _ in cli_help.GROUPS for p in (location.CONF_DIR / group).glob("*.yaml"))


@pytest.mark.parametrize("path", YAMLS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_option_doc_ends_where_a_phrase_ends(path) -> None:  # noqa: ANN001 - a Path
    header, _ = yaml_comments(path)
    paragraph = " ".join(header.split("\n\n", 1)[0].split())
    doc = cli_help.header_doc(path)
    assert doc and paragraph.startswith(doc), (doc, paragraph)
    rest = paragraph[len(doc) :]
    assert rest == "" or (doc.endswith((".", "!", "?")) and rest.startswith(" ")) or rest.startswith("; "), doc


def test_first_sentence_reads_past_abbreviations_and_line_ends() -> None:
    header = "FedX (Li et al. 2020, Alg. 1, Sec. 4): a method whose phrase\nwraps. Second sentence.\n\nMore."
    assert cli_help.first_sentence(header) == "FedX (Li et al. 2020, Alg. 1, Sec. 4): a method whose phrase wraps."
    long = "A: " + "word " * 30 + "(x; y); " + "more " * 40 + "; tail."
    assert cli_help.first_sentence(long, limit=160) == ("A: " + "word " * 30 + "(x; y)")


def test_a_sentence_ends_at_its_line_end_whatever_the_next_line_starts_with() -> None:
    """Issue 51: a header's second line (``data.variant picks ...``, an example command) was read on into the doc."""
    assert cli_help.first_sentence("Synthetic data, no files needed.\ndata.variant picks the reading") == (
        "Synthetic data, no files needed."
    )
    assert cli_help.first_sentence("Top-k (Stich et al.\n2018): sends k entries. compression.k sets k.") == (
        "Top-k (Stich et al. 2018): sends k entries."
    )
    assert cli_help.first_sentence("A split (App.\nD, Fig. 5): halves.") == "A split (App. D, Fig. 5): halves."
