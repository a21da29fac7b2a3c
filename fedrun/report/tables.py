"""Tables from runs: cells are mean +- std over seeds of a metric, rows/cols chosen by config keys.

Row and column labels are ``key=value``. A cell averages over the keys of ``over`` only (seeds by default,
fedrun.report.pooling); when the cells do not all hold the same number of runs, a cell whose n differs from
the most common one shows it, ``81.00 ± 1.41 (n=2)``.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd

from fedrun.report.personal_metrics import PERSONAL_METRICS
from fedrun.report.pooling import DEFAULT_OVER, check_pooling, label, value_key
from fedrun.storage.status import Status

METRICS = {
    "last_k": "summary.test_acc_last_k",
    "best": "summary.test_acc_best",
    "final": "summary.test_acc_final",
    "train": "summary.train_acc_final",
    "rounds_to_target": "summary.round_to_target",
    # personalised runs (eval.local_test): the last evaluated round's per-client statistic (report/personal.py)
    **{name: f"summary.{column}_final" for name, column in PERSONAL_METRICS.items()},
    # a backdoor's attack success rate (attack=backdoor, docs/robustness.md): the last round's, the last-k mean's
    "asr": "summary.asr_final",
    "asr_last_k": "summary.asr_last_k",
}


def default_metric(runs: pd.DataFrame) -> str:
    """A table's cell value when none is asked: the clients' own models' mean accuracy (``local_mean``) when every
    run has one (personalised runs), else the global model's last-k mean."""
    column = METRICS["local_mean"]
    personal = column in runs and len(runs) and bool(runs[column].notna().all())
    return "local_mean" if personal else "last_k"


PERCENT = {"last_k", "best", "final", "train", "asr", "asr_last_k", *PERSONAL_METRICS}
LOWER_IS_BETTER = {"rounds_to_target", "asr", "asr_last_k"}  # (a defence is better the lower the ASR it lets through)


def _cell(values: pd.Series, metric: str, statuses: pd.Series) -> tuple[str, int]:
    """(text, n): mean ± sample std (ddof 1) of the completed runs, or the status of a run that did not complete."""
    bad = statuses[statuses != Status.COMPLETED]
    if len(bad):
        return str(bad.iloc[0]), 0  # diverged / failed / refused / unfinished: never shown as a number
    v = pd.to_numeric(values, errors="coerce").dropna().to_numpy(dtype=float)
    if len(v) == 0:
        return "-", 0
    if metric in PERCENT:
        v = 100 * v
    if len(v) == 1:
        return f"{v[0]:.2f}", 1
    return f"{np.mean(v):.2f} ± {np.std(v, ddof=1):.2f}", len(v)


def _distinct(keys: list[tuple]) -> list[tuple]:
    """The distinct key tuples (NaN equal to NaN), sorted."""
    return sorted({value_key(k): k for k in keys}.values(), key=value_key)


def common_n(counts: list[int]) -> int | None:
    """The most common n of the cells that hold numbers (the largest on a tie); None when there is none."""
    counts = [c for c in counts if c > 0]
    if not counts:
        return None
    top = Counter(counts).most_common()
    return max(n for n, k in top if k == top[0][1])


def make_table(
    runs: pd.DataFrame,
    rows: list[str],
    cols: list[str],
    metric: str,
    over: list[str] | tuple[str, ...] = DEFAULT_OVER,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(formatted table, numeric long table with mean/std/n per cell).

    Raises ValueError for an unknown metric or key, and :class:`fedrun.report.pooling.PoolingError` when a
    config key other than ``rows``, ``cols`` and ``over`` varies inside a cell.
    """
    if metric not in METRICS:
        raise ValueError(f"metric: unknown '{metric}'; valid: {', '.join(METRICS)}")
    col = METRICS[metric]
    for key in rows + cols:
        if key not in runs:
            raise ValueError(f"no config key '{key}' in these runs; try one of: {', '.join(sorted(runs.columns)[:30])}")
    if not rows and not cols:
        raise ValueError("--rows and --cols are both empty; name at least one config key")
    check_pooling(runs, rows + cols, list(over))
    if col not in runs:
        runs = runs.assign(**{col: np.nan})
    keys = rows + cols
    cells: dict[tuple, tuple[str, int]] = {}
    numeric = []
    scale = 100 if metric in PERCENT else 1
    for key_vals, grp in runs.groupby(keys, dropna=False, sort=False):
        key_vals = key_vals if isinstance(key_vals, tuple) else (key_vals,)
        cells[key_vals] = _cell(grp[col], metric, grp["status"])
        ok = pd.to_numeric(grp[grp["status"] == Status.COMPLETED][col], errors="coerce").dropna()
        numeric.append(
            {
                **dict(zip(keys, key_vals, strict=True)),
                "mean": scale * ok.mean() if len(ok) else np.nan,
                "std": scale * ok.std(ddof=1) if len(ok) > 1 else 0.0,
                "n": len(grp),
                "completed": len(ok),
            }
        )
    n0 = common_n([n for _, n in cells.values()])
    text = {k: t if n in (0, n0) else f"{t} (n={n})" for k, (t, n) in cells.items()}
    by_key = {value_key(k): t for k, t in text.items()}
    row_keys = _distinct([k[: len(rows)] for k in text])
    col_keys = _distinct([k[len(rows) :] for k in text])
    wide = pd.DataFrame(
        [[by_key.get(value_key(r + c), "missing") for c in col_keys] for r in row_keys],
        index=[label(rows, r) or metric for r in row_keys],
        columns=[label(cols, c) or metric for c in col_keys],
    )
    return wide, pd.DataFrame(numeric)
