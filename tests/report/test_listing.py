"""report/listing.py: the lines under a report's table, and the n of a layout's odd cells."""

from __future__ import annotations

import pandas as pd

from fedrun.report.collect import DAMAGED, Unreadable
from fedrun.report.listing import listing, n_note
from fedrun.report.pooling import Duplicate


def test_the_listing_names_each_kind_of_run_left_out() -> None:
    runs = pd.DataFrame(
        {"run_dir": ["a", "b", "c"], "status": ["completed", "failed", "refused"], "error": [None, "boom", "bad"]}
    )
    bad = [Unreadable("d", "summary.json: Expecting value"), Unreadable("e", "summary.json: status 'x'", DAMAGED)]
    text = listing(runs, ["algorithm=fedprox"], [Duplicate("f", "a")], bad)
    assert text.splitlines() == [
        "",
        "2 of 3 runs did not complete:",
        "  b: failed: boom",
        "  c: refused: bad",
        "1 runs missing (a cell, or a value other cells have):",
        "  algorithm=fedprox",
        "1 duplicate run dirs (the same config as another; counted once):",
        "  f: same config as a",
        "1 unreadable run dirs (left out):",
        "  d: summary.json: Expecting value",
        "1 damaged run dirs (a summary that disagrees with its run; left out):",
        "  e: summary.json: status 'x'",
    ]
    done = pd.DataFrame({"run_dir": ["a"], "status": ["completed"], "error": [None]})
    assert listing(done, [], [], []) == ""


def test_n_note_names_the_cells_whose_n_differs() -> None:
    assert n_note({("fedavg",): 3, ("fedprox",): 3}, ["algorithm"]) == ""
    note = n_note({("fedavg",): 3, ("fedprox",): 3, ("scaffold",): 2}, ["algorithm"])
    assert note.startswith("n = 3 completed runs per cell except: ") and "n=2" in note
