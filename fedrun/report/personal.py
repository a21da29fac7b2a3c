"""Personalised results (docs/personalised.md): a personalised result is a distribution over clients, not one number.

- ``fedrun/report/personal_metrics.py``: a run's per-client statistics of its last evaluated round, from
  metrics.csv, so ``fedrun-report table --metric local_mean`` (or ``local_worst10``, ``unseen_mean``...) tables the
  mean ± std over seeds of the per-client mean (or of the worst-10% mean) like any other metric;
- :func:`client_accuracies` and :func:`draw_distribution`: every client's accuracy in a run's last evaluated round,
  read from clients.csv, pooled over the runs of a row group (seeds), drawn as one violin per group with its
  mean and worst-10% marked (``fedrun-report clients``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fedrun.core.errors import DataError
from fedrun.report.pooling import label
from fedrun.storage.rundir import RunDir


def client_accuracies(runs: pd.DataFrame, rows: list[str], column: str = "acc") -> pd.DataFrame:
    """(group, client, acc): every trained client's ``column`` in the last round of each run's clients.csv, its group
    the label of ``rows``; unseen clients (``eval.unseen_clients``) are their own group, ``... (unseen)``.
    Raises DataError when no run has a clients.csv."""
    out = []
    for _, run in runs.iterrows():
        path = RunDir(run["run_dir"]).clients_file
        if not path.is_file():
            continue
        frame = pd.read_csv(path)
        frame = frame[(frame["round"] == frame["round"].max()) & (frame["test_samples"] > 0)]
        group = label(rows, tuple(run[k] for k in rows)) or "runs"
        unseen = frame["unseen"].astype(bool) if "unseen" in frame else pd.Series(False, index=frame.index)
        for flag, part in frame.groupby(unseen):
            name = f"{group} (unseen)" if flag else group
            out.append(pd.DataFrame({"group": name, "client": part["client"], "acc": part[column]}))
    if not out:
        raise DataError("no run has a clients.csv; valid: runs with eval.local_test=split or partition")
    return pd.concat(out, ignore_index=True)


def distribution_table(accs: pd.DataFrame) -> pd.DataFrame:
    """Per group: clients (pooled over runs), mean, std, worst 10% mean, median, best 10% mean, in %."""
    rows = []
    for group, part in accs.groupby("group", sort=False):
        a = np.sort(part["acc"].dropna().to_numpy(dtype=float)) * 100
        tail = max(1, math.ceil(a.size / 10))
        rows.append({"group": group, "clients": a.size, "mean": a.mean(), "std": a.std(), "worst10": a[:tail].mean(),
                     "median": float(np.median(a)), "best10": a[-tail:].mean()})  # fmt: skip
    return pd.DataFrame(rows).round(2)


def draw_distribution(accs: pd.DataFrame, path: Path, title: str) -> Any:
    """One violin per group of the clients' accuracies (%), its mean (dot) and worst-10% mean (bar) marked; the
    title wrapped to the figure and the file written atomically (:func:`fedrun.storage.figures.save_figure`)."""
    from fedrun.storage.figures import _plt, save_figure

    plt = _plt()
    groups = list(dict.fromkeys(accs["group"]))
    data = [accs[accs["group"] == g]["acc"].dropna().to_numpy(dtype=float) * 100 for g in groups]
    table = distribution_table(accs).set_index("group")
    fig, ax = plt.subplots(figsize=(max(4.5, 1.4 * len(groups) + 1), 4.0), layout="constrained")
    ax.violinplot(data, showextrema=True, showmedians=False)
    at = np.arange(1, len(groups) + 1)
    ax.scatter(at, table.loc[groups, "mean"], color="black", zorder=3, label="mean")
    ax.scatter(at, table.loc[groups, "worst10"], marker="_", s=300, color="red", zorder=3, label="worst 10% mean")
    ax.set_xticks(at, groups, rotation=20, ha="right")
    ax.set_ylabel("client accuracy (%)")
    ax.set_title(title, fontsize=10)
    ax.legend(loc="lower left", fontsize="small")
    save_figure(fig, path, dpi=120)
    return path
