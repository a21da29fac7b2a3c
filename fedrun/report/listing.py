"""The lines a report prints under its table: runs that did not complete or were refused, missing runs,
duplicates, unreadable and damaged run directories; and, for a paper's layout, the cells whose n differs."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from fedrun.report.collect import DAMAGED, Unreadable
from fedrun.report.pooling import Duplicate, label
from fedrun.report.tables import common_n
from fedrun.storage.status import Status


def n_note(counts: dict[tuple, int], keys: list[str]) -> str:
    """For a layout (whose cells have sub-columns): the cells whose n differs from the common one."""
    n0 = common_n(list(counts.values()))
    odd = [f"{label(keys, k)}: n={n}" for k, n in counts.items() if n and n != n0]
    return f"n = {n0} completed runs per cell except: " + "; ".join(odd) if odd else ""


def _section(title: str, items: list[str], fmt: Callable[[str], str] = lambda s: f"  {s}") -> str:
    return f"\n{title}\n" + "\n".join(fmt(i) for i in items) if items else ""


def listing(runs: pd.DataFrame, missing: list[str], dups: list[Duplicate], bad: list[Unreadable]) -> str:
    """The lines under the table: runs that did not complete or were refused, missing, duplicated, unreadable,
    damaged (a summary that disagrees with its ranges or metrics.csv)."""
    failed = runs[runs["status"] != Status.COMPLETED]
    damaged = [u for u in bad if u.kind == DAMAGED]
    unreadable = [u for u in bad if u.kind != DAMAGED]
    parts = [
        _section(
            f"{len(failed)} of {len(runs)} runs did not complete:",
            [f"{r['run_dir']}: {r['status']}: {r.get('error') or ''}" for _, r in failed.iterrows()],
        ),
        _section(f"{len(missing)} runs missing (a cell, or a value other cells have):", missing),
        _section(
            f"{len(dups)} duplicate run dirs (the same config as another; counted once):",
            [f"{d.run_dir}: same config as {d.same_as}" for d in dups],
        ),
        _section(f"{len(unreadable)} unreadable run dirs (left out):", [f"{u.run_dir}: {u.why}" for u in unreadable]),
        _section(
            f"{len(damaged)} damaged run dirs (a summary that disagrees with its run; left out):",
            [f"{u.run_dir}: {u.why}" for u in damaged],
        ),
    ]
    return "".join(parts)
