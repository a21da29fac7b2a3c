"""The per-client statistics of personalised runs as report fields (docs/personalised.md): ``fedrun-report table
--metric local_mean`` and the others of :data:`PERSONAL_METRICS` (fedrun/report/personal.py draws the distribution)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from fedrun.storage.rundir import RunDir

# metric name (fedrun-report table --metric) -> metrics.csv column whose last evaluated value a cell shows
PERSONAL_METRICS = {
    "local_mean": "local_acc_mean",
    "local_wmean": "local_acc_wmean",
    "local_worst10": "local_acc_worst10",
    "local_global_mean": "local_global_acc_mean",
    "unseen_mean": "unseen_acc_mean",
    "unseen_global_mean": "unseen_global_acc_mean",
}


def personal_fields(run: Path) -> dict[str, float]:
    """``summary.<column>_final`` of the last round with a local_acc_mean in ``run``'s metrics.csv, and
    ``summary.<column>_best``, the column's best evaluated round (PFLlib's and pFedMe's tables report the best
    round of the clients' accuracy); {} without."""
    path = RunDir(run).metrics_file
    if not path.is_file():
        return {}
    try:
        rows = pd.read_csv(path)
    except (OSError, ValueError, pd.errors.ParserError):
        return {}
    if "local_acc_mean" not in rows:
        return {}
    rows = rows[pd.to_numeric(rows["local_acc_mean"], errors="coerce").notna()]
    if rows.empty:
        return {}
    last = rows.iloc[-1]
    out = {f"summary.{c}_final": float(last[c]) for c in PERSONAL_METRICS.values() if c in rows}
    for c in PERSONAL_METRICS.values():
        best = pd.to_numeric(rows[c], errors="coerce").max() if c in rows else float("nan")
        if best == best:  # a column of no evaluated value (NaN) gives no field
            out[f"summary.{c}_best"] = float(best)
    return out
