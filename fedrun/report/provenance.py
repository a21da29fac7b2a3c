"""Where a report's numbers come from: the stand-in data notice, and how it travels into each output file.

When any run of a report trained on stand-in data (``data.standin``: the dataset's files were not found, so
seeded random data of its shape replaced them), the one line of :func:`standin_note` goes into every file the
report writes: under the printed and Markdown table, as a first ``#`` line of a CSV (:func:`csv_text`; read it
with ``pd.read_csv(path, comment="#")``), as a ``%`` line and in the caption of a ``.tex``
(:func:`fedrun.report.latex.to_latex`), and on a figure and in its PNG's ``Warning`` text chunk
(:func:`fedrun.storage.figures.save_figure`).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from fedrun.storage.rundir import RunDir

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


def run_dirs_note(run_dirs: Iterable[Path]) -> str:
    """:func:`standin_note` of run directories read one by one (their ``summary.json``); a directory without a
    readable summary counts as a run on real data."""
    rows = []
    for d in run_dirs:
        s = RunDir(d).summary()
        rows.append({STANDIN: s is not None and s.data_standin is True, "summary.data": s.data if s else None})
    return standin_note(pd.DataFrame(rows, columns=[STANDIN, "summary.data"]))


def csv_text(frame: pd.DataFrame, notice: str = "") -> str:
    """``frame`` as CSV (no index), led by ``# notice`` when there is one: ``pd.read_csv(path, comment="#")``
    reads the table back, and a reader that does not skip comments sees the notice as the header."""
    head = "".join(f"# {line}\n" for line in notice.splitlines())
    return head + frame.to_csv(index=False)
