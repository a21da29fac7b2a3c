"""The paper's order of a reproduce target's rows and columns, whatever the order of the run directories.

Runs of ``make reproduce-*`` carry ``tags.preset`` and ``tags.method``; the target they belong to
(fedrun/papers/targets.py) lists its presets, methods and swept values in the paper's order. :func:`paper_sorted`
sorts the runs by it, so a layout that takes cells in order of first appearance prints the paper's order,
however the sweep named its job directories. Runs of no target keep their order.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import yaml


def _same(a: Any, b: Any) -> bool:
    try:
        return a == b or float(a) == float(b)
    except (TypeError, ValueError):
        return str(a) == str(b)


def paper_order(runs: pd.DataFrame) -> dict[str, list[Any]]:
    """key -> values in the paper's order, from the reproduce target holding these runs' presets and methods."""
    if "tags.preset" not in runs or runs["tags.preset"].isna().all():
        return {}
    from fedrun.papers.targets import TARGETS

    presets = set(runs["tags.preset"].dropna())
    methods = set(runs["tags.method"].dropna()) if "tags.method" in runs else set()
    best, best_score = None, -1
    for t in TARGETS:
        if not presets <= set(t.presets) or not methods <= {m.label for m in t.methods}:
            continue
        order = {k: [yaml.safe_load(x) for x in v.split(",")] for k, v in t.sweep}
        score = sum(
            all(any(_same(v, w) for w in order[k]) for v in runs[k].dropna().unique()) for k in order if k in runs
        )
        if score > best_score:
            best, best_score = {"tags.preset": list(t.presets), "tags.method": [m.label for m in t.methods]}, score
            best.update(order)
    return best or {}


def paper_sorted(runs: pd.DataFrame, order: dict[str, list[Any]] | None = None) -> pd.DataFrame:
    """``runs`` stably sorted by the paper's order of each ordered key (preset, method, swept values)."""
    order = paper_order(runs) if order is None else order
    keys = [k for k in order if k in runs]
    if not keys or runs.empty:
        return runs

    def rank(k: str, v: Any) -> int:
        return next((i for i, w in enumerate(order[k]) if _same(v, w)), len(order[k]))

    ranks = pd.DataFrame({f"_r{i}": [rank(k, v) for v in runs[k]] for i, k in enumerate(keys)})
    ranks["_pos"] = range(len(runs))
    return runs.iloc[ranks.sort_values([*ranks.columns], kind="stable")["_pos"].to_numpy()]
