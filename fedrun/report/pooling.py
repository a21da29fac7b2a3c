"""What a table cell may pool, and what the report must say under the table.

A cell is the runs sharing the values of the table's keys (rows and columns). It averages over the keys named
in ``over`` (seeds, by default) and nothing else: a config key that takes two values inside a cell is an error
naming it (:func:`check_pooling`), or, when asked, becomes a column (:func:`varying_keys`). Two run directories
with the same config are one run twice: the first is kept, the other listed (:func:`drop_duplicates`). A cell
lacking a value of ``over`` that other cells have is listed as missing (:func:`missing_runs`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from fedrun.report.collect import config_columns
from fedrun.storage.status import Status

DEFAULT_OVER = ("seed",)


class PoolingError(ValueError):
    """A config key varies inside a cell that was not asked to pool it."""


def _groups(runs: pd.DataFrame, keys: list[str]):  # noqa: ANN202 - (key tuple, frame) pairs
    if not keys:
        return [((), runs)]
    return [(k if isinstance(k, tuple) else (k,), g) for k, g in runs.groupby(keys, dropna=False, sort=False)]


def label(keys: list[str], vals: tuple) -> str:
    """``key=value, key=value`` (never a Python tuple)."""
    return ", ".join(f"{k}={_text(v)}" for k, v in zip(keys, vals, strict=True))


def _text(v: object) -> str:
    if isinstance(v, tuple):
        return "[" + ",".join(map(str, v)) + "]"
    return "-" if v is None or (isinstance(v, float) and v != v) else str(v)


def varying_keys(runs: pd.DataFrame, keys: list[str], over: list[str]) -> dict[str, tuple[str, list[str]]]:
    """Config keys, other than ``keys`` and ``over``, that take more than one value inside some cell:
    key -> (that cell's label, its values). Missing values (a key a run's config lacks) do not count."""
    cols = [c for c in config_columns(runs) if c not in keys and c not in over]
    if not cols or runs.empty:
        return {}
    # one pass counts each column's values per cell; only the columns that vary are looked at cell by cell
    counts = runs.groupby(keys, dropna=False, sort=False)[cols].nunique() if keys else runs[cols].nunique().to_frame().T
    cols = [c for c in cols if (counts[c] > 1).any()]
    out: dict[str, tuple[str, list[str]]] = {}
    for vals, grp in _groups(runs, keys) if cols else []:
        for c in cols:
            if c in out:
                continue
            distinct = grp[c].dropna().unique()
            if len(distinct) > 1:
                out[c] = (label(keys, vals) or "the table", sorted(map(_text, distinct)))
    return _outermost(out)


def _outermost(found: dict[str, tuple[str, list[str]]]) -> dict[str, tuple[str, list[str]]]:
    """Drop ``x.name`` when ``x`` (the group shorthand for the same value) is listed too."""
    return {k: v for k, v in found.items() if not (k.endswith(".name") and k[: -len(".name")] in found)}


def check_pooling(runs: pd.DataFrame, keys: list[str], over: list[str]) -> None:
    """Raise :class:`PoolingError` naming the first key that varies inside a cell and is not in ``over``."""
    bad = varying_keys(runs, keys, over)
    if not bad:
        return
    key, (cell, values) = next(iter(bad.items()))
    others = f" (also: {', '.join(list(bad)[1:6])})" if len(bad) > 1 else ""
    shown = ", ".join(values[:6]) + (", ..." if len(values) > 6 else "")
    raise PoolingError(
        f"{key} varies inside a cell ({cell}: {shown}){others}; a cell averages over {', '.join(over) or 'nothing'}"
        f" only: add {key} to --rows or --cols, pool it with --over {','.join([*over, key])}, or pass --split to"
        " make every such key a column"
    )


@dataclass(frozen=True)
class Duplicate:
    run_dir: str
    same_as: str


def drop_duplicates(runs: pd.DataFrame) -> tuple[pd.DataFrame, list[Duplicate]]:
    """Runs with one row per config (``fingerprint``): of the runs with the same config the completed one
    (else the first in sweep order) is kept; the others are returned as duplicates."""
    if "fingerprint" not in runs or runs.empty:
        return runs, []
    order = runs.assign(_done=runs["status"] != Status.COMPLETED, _pos=range(len(runs)))
    order = order.sort_values(["_done", "_pos"], kind="stable")
    keep_pos, dups = [], []
    first: dict[str, str] = {}
    for _, r in order.iterrows():
        fp = r["fingerprint"]
        if fp in first:
            dups.append(Duplicate(r["run_dir"], first[fp]))
        else:
            first[fp] = r["run_dir"]
            keep_pos.append(r["_pos"])
    kept = runs.iloc[sorted(keep_pos)]
    return kept, sorted(dups, key=lambda d: d.run_dir)


def missing_runs(runs: pd.DataFrame, keys: list[str], over: list[str]) -> list[str]:
    """``cell: over=value`` for each value combination of ``over`` that some cell has and this cell lacks."""
    over = [k for k in over if k in runs]
    if not over or runs.empty:
        return []
    expected = set(runs[over].astype(object).itertuples(index=False, name=None))
    out = []
    for vals, grp in _groups(runs, keys):
        have = set(grp[over].astype(object).itertuples(index=False, name=None))
        for m in sorted(expected - have, key=str):
            out.append(f"{label(keys, vals) or 'all runs'}: {label(over, m)}")
    return out


def empty_cells(runs: pd.DataFrame, rows: list[str], cols: list[str]) -> list[str]:
    """``row, col: no runs`` for each cell of the rows x columns grid that holds no run at all."""
    if not rows or not cols or runs.empty:
        return []

    have = {value_key(k) for k, _ in _groups(runs, rows + cols)}
    row_vals = {value_key(k): k for k, _ in _groups(runs, rows)}
    col_vals = {value_key(k): k for k, _ in _groups(runs, cols)}
    return [
        f"{label(rows + cols, r + c)}: no runs"
        for rk, r in row_vals.items()
        for ck, c in col_vals.items()
        if rk + ck not in have
    ]


def cell_counts(runs: pd.DataFrame, keys: list[str]) -> dict[tuple, int]:
    """Completed runs per cell (the n of its mean)."""
    return {vals: int((grp["status"] == Status.COMPLETED).sum()) for vals, grp in _groups(runs, keys)}


def value_key(vals: tuple) -> tuple:
    """Sort key for mixed config values: numbers by value, then text, then missing."""
    out = []
    for v in vals:
        if v is None or (isinstance(v, float) and np.isnan(v)):
            out.append((2, 0.0, ""))
        elif isinstance(v, (int, float, np.number)) and not isinstance(v, bool):
            out.append((0, float(v), ""))
        else:
            out.append((1, 0.0, str(v)))
    return tuple(out)
