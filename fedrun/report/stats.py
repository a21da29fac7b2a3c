"""Statistics the paper tables need beyond a mean over seeds.

- :func:`rounds_saved`: communication rounds a run saves against a baseline to first reach a target
  accuracy (FedSAM Tables 1-2 "Round" columns; FedCos/FedIMA speed-ups).
- :func:`std_across`: the spread of a metric across the values of one config key, per method (FedGAM
  Table 4 sigma(E) over local epochs E and Table 5 sigma(C) over participation C).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from fedrun.storage.rundir import METRICS_FILE
from fedrun.storage.status import Status


def load_metrics(run_dir: Path) -> pd.DataFrame:
    """A run's metrics.csv (one row per evaluated round)."""
    return pd.read_csv(Path(run_dir) / METRICS_FILE)


def rounds_to_target(metrics: pd.DataFrame, target: float, column: str = "test_acc") -> int | None:
    """The first evaluated round whose ``column`` is >= ``target`` (None when never reached)."""
    hit = metrics.index[metrics[column].to_numpy() >= target]
    return int(metrics.loc[hit[0], "round"]) if len(hit) else None


@dataclass(frozen=True)
class RoundsSaved:
    """Rounds to ``target`` of a run and of its baseline, and what the run saves.

    ``saved`` = baseline_round - run_round (negative: the run is slower); ``speedup`` = baseline_round /
    run_round. Both are None when either run never reaches the target; ``saved_at_least`` is then the
    lower bound baseline_rounds_run - run_round when only the baseline misses it.
    """

    target: float
    run_round: int | None
    baseline_round: int | None
    saved: int | None
    speedup: float | None
    saved_at_least: int | None = None


def rounds_saved(run: pd.DataFrame, baseline: pd.DataFrame, target: float, column: str = "test_acc") -> RoundsSaved:
    """Communication rounds ``run`` saves against ``baseline`` to first reach ``target`` in ``column``."""
    r, b = rounds_to_target(run, target, column), rounds_to_target(baseline, target, column)
    if r is not None and b is not None:
        return RoundsSaved(target, r, b, b - r, b / r)
    at_least = int(baseline["round"].max()) - r if r is not None and len(baseline) else None
    return RoundsSaved(target, r, b, None, None, at_least)


def std_across(
    runs: pd.DataFrame,
    key: str,
    metric: str,
    by: list[str] | tuple[str, ...] = ("algorithm",),
    ddof: int = 0,
) -> pd.DataFrame:
    """The spread of ``metric`` across the values of config key ``key``, for each group of ``by``.

    ``runs`` is :func:`fedrun.report.collect.load_runs`' frame (one row per run). The metric is first
    averaged over the other runs of a setting (seeds), then its std (``ddof`` 0 by default: the values of
    E or C are the whole population, not a sample) and variance are taken across the settings. Only
    completed runs count. Returns one row per group: ``by`` columns, ``mean``, ``std``, ``var``,
    ``n_values`` (settings) and ``values`` (the per-setting means, ordered by ``key``).
    """
    by = list(by)
    for col in [*by, key, metric]:
        if col not in runs:
            raise ValueError(f"std_across: no column '{col}' in these runs")
    ok = runs[runs["status"] == Status.COMPLETED] if "status" in runs else runs
    per_setting = ok.groupby([*by, key], dropna=False, sort=True)[metric].mean().reset_index()
    rows = []
    for group, grp in per_setting.groupby(by, dropna=False, sort=True):
        group = group if isinstance(group, tuple) else (group,)
        v = grp[metric].astype(float).to_numpy()
        std = float(np.std(v, ddof=ddof)) if len(v) > ddof else float("nan")
        rows.append(
            {
                **dict(zip(by, group, strict=True)),
                "mean": float(np.mean(v)),
                "std": std,
                "var": std**2,
                "n_values": len(v),
                "values": tuple(float(x) for x in v),
            }
        )
    return pd.DataFrame(rows)


def rounds_saved_vs(
    runs: pd.DataFrame,
    baseline: str,
    target: float,
    key: str = "algorithm",
    match: list[str] | tuple[str, ...] = ("seed",),
    column: str = "test_acc",
) -> pd.DataFrame:
    """``runs`` (from :func:`fedrun.report.collect.load_runs`) with ``round_to_target``, ``baseline_round``
    and ``rounds_saved`` columns: each run against the run whose ``key`` is ``baseline`` and whose ``match``
    keys (seed, partition.alpha...) are equal. NaN where there is no single such baseline run or either run
    misses ``target``; metrics are read from each run's metrics.csv."""
    for col in [key, *match]:
        if col not in runs:
            raise ValueError(f"rounds_saved_vs: no column '{col}' in these runs")
    curves = {d: load_metrics(Path(d)) for d in runs["run_dir"] if (Path(d) / METRICS_FILE).is_file()}
    base = runs[runs[key] == baseline]
    out = []
    for _, r in runs.iterrows():
        cand = base[(base[list(match)] == r[list(match)]).all(axis=1)] if match else base
        run_curve = curves.get(r["run_dir"])
        row: dict[str, float | None] = {"round_to_target": np.nan, "baseline_round": np.nan, "rounds_saved": np.nan}
        if run_curve is not None:
            row["round_to_target"] = rounds_to_target(run_curve, target, column)
        if len(cand) == 1 and run_curve is not None and cand["run_dir"].iloc[0] in curves:
            s = rounds_saved(run_curve, curves[cand["run_dir"].iloc[0]], target, column)
            row.update(baseline_round=s.baseline_round, rounds_saved=s.saved)
        out.append(row)
    extra = pd.DataFrame(out, index=runs.index).astype(float)
    return pd.concat([runs.drop(columns=[c for c in extra if c in runs]), extra], axis=1)
