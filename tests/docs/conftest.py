"""Fixtures of the documentation's tests."""

from __future__ import annotations

import pytest

from fedrun.papers.reproduction import doc_pages
from fedrun.papers.scorecard import load_evidence


@pytest.fixture(scope="session")
def generated_pages() -> dict[str, str]:
    """Every generated page of the site (``doc_pages``), built once: building them scores every evidence record's
    cells (seconds of CPU), and the tests only read them."""
    return doc_pages(load_evidence())
