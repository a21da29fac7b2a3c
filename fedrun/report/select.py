"""Hyperparameter selection as the papers do it: per method and setting, keep the value with the best mean."""

from __future__ import annotations

import pandas as pd

from fedrun.storage.status import Status


def select_best(runs: pd.DataFrame, key: str, group: list[str], metric: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(runs with only the chosen ``key`` value per ``group``, a table of the chosen values).

    The score of a value is the mean over seeds of ``metric`` (a ``summary.*`` column, higher is better) of its
    completed runs. Runs without ``key`` (methods that lack the hyperparameter) pass through unchanged.
    """
    if key not in runs:
        raise ValueError(f"--select: no config key '{key}' in these runs")
    has = runs[key].notna()
    keep, chosen = [runs[~has]], []
    swept = runs[has].assign(_score=pd.to_numeric(runs.loc[has, metric], errors="coerce"))
    swept.loc[swept["status"] != Status.COMPLETED, "_score"] = float("nan")
    for vals, grp in swept.groupby(group, dropna=False, sort=False) if group else [((), swept)]:
        scores = grp.groupby(key)["_score"].mean().dropna()
        if scores.empty:
            keep.append(grp)
            continue
        best = scores.idxmax()
        keep.append(grp[grp[key] == best])
        vals = vals if isinstance(vals, tuple) else (vals,)
        chosen.append(
            {
                **dict(zip(group, vals, strict=True)),
                key: best,
                "score": 100 * scores.max(),
                "candidates": ", ".join(f"{k}: {100 * v:.2f}" for k, v in scores.items()),
            }
        )
    out = pd.concat(keep).drop(columns="_score", errors="ignore").sort_values("run_dir")
    return out, pd.DataFrame(chosen)
