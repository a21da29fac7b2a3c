"""Tables from runs: cells are mean +- std over seeds of a metric, rows/cols chosen by config keys."""

from __future__ import annotations

import numpy as np
import pandas as pd

METRICS = {
    "last_k": "summary.test_acc_last_k",
    "best": "summary.test_acc_best",
    "final": "summary.test_acc_final",
    "train": "summary.train_acc_final",
    "rounds_to_target": "summary.round_to_target",
}
PERCENT = {"last_k", "best", "final", "train"}


def _fmt(values: pd.Series, metric: str, statuses: pd.Series) -> str:
    bad = statuses[statuses != "completed"]
    if len(bad):
        return bad.iloc[0]  # diverged / failed / unfinished: never shown as a number
    v = values.astype(float).to_numpy()
    if metric in PERCENT:
        v = 100 * v
    if len(v) == 1:
        return f"{v[0]:.2f}"
    return f"{np.mean(v):.2f} ± {np.std(v, ddof=1):.2f}"


def make_table(runs: pd.DataFrame, rows: list[str], cols: list[str], metric: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(formatted table, numeric long table with mean/std/n per cell)."""
    if metric not in METRICS:
        raise ValueError(f"metric: unknown '{metric}'; valid: {', '.join(METRICS)}")
    col = METRICS[metric]
    for key in rows + cols:
        if key not in runs:
            raise ValueError(f"no config key '{key}' in these runs; try one of: {', '.join(sorted(runs.columns)[:30])}")
    if col not in runs:
        runs = runs.assign(**{col: np.nan})
    keys = rows + cols
    cells, numeric = {}, []
    for key_vals, grp in runs.groupby(keys, dropna=False, sort=True):
        key_vals = key_vals if isinstance(key_vals, tuple) else (key_vals,)
        cells[key_vals] = _fmt(grp[col], metric, grp["status"])
        ok = grp[grp["status"] == "completed"][col].astype(float)
        scale = 100 if metric in PERCENT else 1
        numeric.append(
            {
                **dict(zip(keys, key_vals, strict=True)),
                "mean": scale * ok.mean(),
                "std": scale * ok.std(ddof=1) if len(ok) > 1 else 0.0,
                "n": len(grp),
                "completed": len(ok),
            }
        )
    long = pd.DataFrame(numeric)
    s = pd.Series(cells)
    s.index = pd.MultiIndex.from_tuples(list(cells), names=keys)
    table = s.unstack(list(range(len(rows), len(keys)))) if cols else s.to_frame(metric)
    if len(cols) == 1:
        table.columns = [f"{cols[0]}={c}" for c in table.columns]
    return table, long
