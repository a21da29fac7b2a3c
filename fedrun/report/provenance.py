"""Lines printed under a table about where its numbers come from (stand-in data)."""

from __future__ import annotations

import pandas as pd

STANDIN = "summary.data_standin"


def standin_note(runs: pd.DataFrame) -> str:
    """One line naming the datasets that runs replaced by stand-in data (``data.standin``); "" when none did."""
    if STANDIN not in runs:
        return ""
    used = runs[runs[STANDIN].eq(True)]
    if used.empty:
        return ""
    names = sorted({str(n) for n in used["summary.data"]})  # written beside data_standin in every summary
    return (
        f"stand-in data (dataset files not found): {', '.join(names)}; {len(used)} of {len(runs)} runs trained on"
        " seeded random data of the dataset's shape, so their numbers are not results"
    )
