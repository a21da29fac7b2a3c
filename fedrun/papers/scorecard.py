"""The reproduction scorecard: each published cell of a target's tables beside ours (``fedrun-report --paper``).

The card judges the papers' claims, not single cells (:mod:`fedrun.papers.claims`): per column, the proposed
method's gain over each baseline, ours beside the paper's, on the seeds both rows ran; and the column orders only
where the paper separates two rows by more than the tolerance. Cells are listed with the evidence record each
came from (:mod:`fedrun.papers.setups`: its commit, note, and a flag where a column's records ran different
setups); the text is :mod:`fedrun.papers.card`.

The papers' cells ship as data (``fedrun/papers/cells/<paper>.csv``: paper, table, row, column, value, spread,
and how to find our runs of the cell: the summary ``metric``, the ``preset`` and the ``setting``, config
``key=value`` pairs joined by ``;``). A cell of ours is the mean over seeds of the runs of the cell's preset,
method row (``tags.method``, or the row's overrides in :mod:`fedrun.papers.targets`) and setting, times 100 for
accuracies, with the value of each seed kept (``values``). A cell is *within* when it is within 1.5 points of the
paper's, or within our spread over seeds (sample std). Runs on stand-in data (``summary.data_standin``) are never
compared.

Evidence records (``fedrun/papers/evidence/*.json``) keep full-length cells run on real data (command, commit,
seeds, wall time, load, the numbers); :func:`evidence_runs` turns them into runs the same card reads.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from io import StringIO
from typing import Any

import numpy as np
import pandas as pd

from fedrun.papers.targets import BY_NAME, Method, Target
from fedrun.report.provenance import STANDIN
from fedrun.storage.status import Status

TOLERANCE = 1.5  # points: a cell within this of the paper's is reproduced
LOWER_IS_BETTER = {"round_to_target", "asr_last_k", "asr_final"}
PERCENT = {"round_to_target": 1.0}  # metrics not in [0, 1] (others are scaled by 100)
# pFedMe (Table 1, Synthetic rows): the cells' published values are empty: the table is an image in the paper and
# in CharlieDinh/pFedMe's README, and no text of it could be read here (docs/personalised.md); the runs are recorded
# PFLlib: its benchmark page's leaderboard (TsingZ0/PFLlib docs/benchmark.html), the Fashion-MNIST columns
# Robust (issue 52, target robust-fmnist): no table of the papers' values could be read as text either; the papers'
# stated claims are judged instead (fedrun/papers/robust_claims.py)
PAPERS = ("FedIMA", "FedGAM", "FedCos", "FedLAW", "FedSAM", "pFedMe", "PFLlib", "Robust")
CELL_COLUMNS = ["paper", "table", "row", "column", "value", "spread", "metric", "preset", "setting"]


def load_cells(paper: str | None = None) -> pd.DataFrame:
    """The published cells shipped with fedrun (all papers, or ``paper``'s), in the papers' reading order."""
    frames = []
    root = resources.files("fedrun.papers") / "cells"
    for name in PAPERS if paper is None else (paper,):
        text = (root / f"{name.lower()}.csv").read_text(encoding="utf-8")
        frames.append(pd.read_csv(StringIO(text), dtype=str, keep_default_na=False))
    cells = pd.concat(frames, ignore_index=True)
    cells["value"] = pd.to_numeric(cells["value"], errors="coerce")
    cells["spread"] = pd.to_numeric(cells["spread"], errors="coerce")
    return cells


def no_cells(target: Target) -> str | None:
    """Why ``target`` has no scorecard (its paper ships no published cells in ``fedrun/papers/cells/``), or None."""
    if target.paper in PAPERS:
        return None
    return f"scorecard: none; fedrun ships no published cells of {target.paper} ({target.note})"


def no_scorecard(name: str) -> str | None:
    """Why ``fedrun-report scorecard NAME`` prints no card (an unknown target, or one without published cells),
    in one line; None when it has one."""
    target = BY_NAME.get(name)
    if target is None:
        return f"--paper: unknown target '{name}'; valid: {', '.join(BY_NAME)}"
    return no_cells(target)


def setting_pairs(setting: str) -> list[tuple[str, str]]:
    """``"a=1;b=x"`` -> [("a", "1"), ("b", "x")]."""
    return [(k, v) for k, _, v in (p.partition("=") for p in setting.split(";") if p)]


def same(run_value: Any, want: str) -> bool:
    """A config value equals an override's text (numbers by value: 100 == 100.0 == 1e2; null == NaN)."""
    if want in ("null", "None"):
        return run_value is None or (isinstance(run_value, float) and math.isnan(run_value))
    try:
        return math.isclose(float(run_value), float(want), rel_tol=1e-9)
    except (TypeError, ValueError):
        return str(run_value).lower() == want.lower()


def _column(runs: pd.DataFrame, key: str) -> str | None:
    """The runs' column for an override key (``algorithm=x`` is ``algorithm.name`` in a run's config)."""
    for col in (f"{key}.name", key) if "." not in key else (key,):
        if col in runs:
            return col
    return None


def _match(runs: pd.DataFrame, pairs: list[tuple[str, str]]) -> pd.Series:
    mask = pd.Series(True, index=runs.index)
    for key, values in pairs:
        col = _column(runs, key)
        if col is None:
            return pd.Series(False, index=runs.index)
        options = values.split(",")
        mask &= runs[col].map(lambda v, o=options: any(same(v, x) for x in o))  # type: ignore[misc]
    return mask


def _preset_mask(runs: pd.DataFrame, preset: str) -> pd.Series:
    for col in ("tags.preset", "experiment"):
        if col in runs:
            return runs[col].astype(str).eq(preset)
    return pd.Series(False, index=runs.index)


def _method_mask(runs: pd.DataFrame, target: Target, row: str, preset: str) -> pd.Series:
    if "tags.method" in runs and runs["tags.method"].notna().any():
        return runs["tags.method"].astype(str).eq(row)
    method = next((m for m in target.methods if m.label == row), None)
    if method is None:
        return pd.Series(False, index=runs.index)
    return _match(runs, [(k, v) for k, _, v in (o.partition("=") for o in Method.for_preset(method, preset))])


@dataclass(frozen=True)
class Ours:
    """Our value of one cell: mean and sample std over seeds (``n`` runs), the value of each seed (points), the
    evidence records the runs came from, or why there is none."""

    mean: float = float("nan")
    std: float = float("nan")
    n: int = 0
    note: str = ""
    values: dict[int, float] = field(default_factory=dict)
    records: tuple[str, ...] = ()


def _per_seed(mine: pd.DataFrame, col: str, scale: float) -> dict[int, float]:
    """{seed: value in points}, by seed (runs without a seed column are numbered; two runs of one seed: their
    mean)."""
    v = pd.to_numeric(mine[col], errors="coerce") * scale
    seeds = mine["seed"] if "seed" in mine else pd.Series(range(len(mine)), index=mine.index)
    ok = v.notna()
    return {int(k): float(x) for k, x in v[ok].groupby(seeds[ok].astype(int)).mean().items()}


def _cell_mask(
    runs: pd.DataFrame, target: Target, cell: Mapping[str, Any], memo: dict[tuple[str, ...], pd.Series | None]
) -> pd.Series | None:
    """The runs of ``cell``'s preset, method row and setting, None when its preset has none. ``memo`` keeps each
    preset's, row's and setting's mask over these ``runs`` for the next cell (a card's cells share them); the masks
    are never changed in place."""
    preset, row, setting = cell["preset"], cell["row"], cell["setting"]
    if ("preset", preset) not in memo:
        mask = _preset_mask(runs, preset)
        memo["preset", preset] = mask if mask.any() else None
    mask = memo["preset", preset]
    if mask is None:  # no run of the preset: most cells of a card of a few records
        return None
    if ("method", row, preset) not in memo:
        memo["method", row, preset] = _method_mask(runs, target, row, preset)
    if ("setting", setting) not in memo:
        memo["setting", setting] = _match(runs, setting_pairs(setting))
    return mask & memo["method", row, preset] & memo["setting", setting]


def our_cell(
    runs: pd.DataFrame,
    target: Target,
    cell: Mapping[str, Any],
    memo: dict[tuple[str, ...], pd.Series | None] | None = None,
) -> Ours:
    """Our value of ``cell`` from ``runs`` (completed runs on real data only); ``memo``: the masks of the cells
    already scored on these same ``runs`` (:func:`scorecard`'s, one per card), none by default."""
    if not cell["metric"] or not cell["preset"]:
        return Ours(note="not a run metric" if cell["preset"] else "no preset runs this setting")
    mask = _cell_mask(runs, target, cell, {} if memo is None else memo)
    if mask is None or not mask.any():
        return Ours(note="not run")
    mine = runs[mask]
    if STANDIN in mine:
        real = mine[~mine[STANDIN].eq(True)]
        if real.empty:
            return Ours(note="stand-in data: not compared")
        mine = real
    mine = mine[mine["status"] == Status.COMPLETED] if "status" in mine else mine
    col = f"summary.{cell['metric']}"
    if mine.empty or col not in mine:
        return Ours(note="no completed run")
    if target.select and target.select in mine and mine[target.select].nunique() > 1:
        means = mine.groupby(target.select)[col].apply(lambda s: pd.to_numeric(s, errors="coerce").mean())
        best = means.idxmin() if cell["metric"] in LOWER_IS_BETTER else means.idxmax()
        mine = mine[mine[target.select] == best]
    v = pd.to_numeric(mine[col], errors="coerce").dropna().to_numpy(dtype=float)
    if len(v) == 0:
        return Ours(note="never reached" if cell["metric"] == "round_to_target" else "no value")
    scale = PERCENT.get(cell["metric"], 100.0)
    v = v * scale
    records = tuple(dict.fromkeys(mine["evidence"].dropna())) if "evidence" in mine else ()
    return Ours(
        float(v.mean()),
        float(v.std(ddof=1)) if len(v) > 1 else float("nan"),
        len(v),
        values=_per_seed(mine, col, scale),
        records=records,
    )


def reproduced(ours: float, std: float, paper: float) -> bool:
    """Within 1.5 points of the paper's value, or within our seed spread."""
    diff = abs(ours - paper)
    return diff <= TOLERANCE + 1e-9 or (not math.isnan(std) and diff <= std)


CARD_COLUMNS = [
    *["table", "row", "column", "metric", "ours", "ours_std", "n", "paper", "difference", "reproduced", "note"],
    *["values", "records"],
]


def published(target: Target) -> pd.DataFrame:
    """The published cells of ``target``'s presets (a value and a run metric): what a full sweep would run."""
    cells = load_cells(target.paper)
    return cells[cells["preset"].isin(target.presets) & cells["value"].notna() & cells["metric"].ne("")]


def scorecard(runs: pd.DataFrame, target: Target, table: str | None = None) -> pd.DataFrame:
    """One line per published cell of ``target``'s presets (of its ``table`` only, when given) that our runs cover
    (and, as notes, those on stand-in data): table, row, column, ours, ours_std, n, paper, difference, reproduced
    (within the tolerance), note, values ({seed: points}) and records (the evidence records of the runs)."""
    cells = load_cells(target.paper)
    cells = cells[cells["preset"].isin(target.presets)]
    if table is not None:
        cells = cells[cells["table"].astype(str) == table]
    lines = []
    memo: dict[tuple[str, ...], pd.Series | None] = {}
    for cell in cells.to_dict("records"):  # dicts: a row's Series costs more than scoring a cell without runs
        ours = our_cell(runs, target, cell, memo)
        if ours.note in ("not run", "no preset runs this setting", "not a run metric"):
            continue
        line = {
            "table": cell["table"],
            "row": cell["row"],
            "column": cell["column"],
            "metric": cell["metric"],
            "ours": ours.mean,
            "ours_std": ours.std,
            "n": ours.n,
            "paper": cell["value"],
            "difference": ours.mean - cell["value"],
            "reproduced": bool(ours.n and not math.isnan(cell["value"]))
            and reproduced(ours.mean, ours.std, cell["value"]),
            "note": ours.note,
            "values": ours.values,
            "records": ours.records,
        }
        lines.append(line)
    return pd.DataFrame(lines, columns=CARD_COLUMNS)


# ---- evidence records ----------------------------------------------------------------------------------


def load_evidence() -> list[dict[str, Any]]:
    """The evidence records shipped with fedrun (``fedrun/papers/evidence/*.json``), by file name."""
    root = resources.files("fedrun.papers") / "evidence"
    names = sorted(p.name for p in root.iterdir() if p.name.endswith(".json"))
    return [json.loads((root / n).read_text(encoding="utf-8")) for n in names]


def evidence_runs(records: list[dict[str, Any]] | None = None) -> pd.DataFrame:
    """The records' runs as rows :func:`scorecard` reads: ``tags.preset``, ``tags.method``, the setting's keys,
    ``seed``, ``status`` and ``summary.<metric>`` (a fraction, as a summary holds it). A cell's seed run as the
    preset is now (a record without ``setup``) supersedes the same cell's seed in a record of an older setup, so a
    table re-run seed by seed comes to one setup (:func:`_current_first`)."""
    rows = []
    for rec in load_evidence() if records is None else records:
        for cell in rec["cells"]:
            for seed, value in cell["values"].items():
                row: dict[str, Any] = {"tags.preset": rec["preset"], "tags.method": cell["row"], "seed": int(seed)}
                row.update({k: v for k, v in setting_pairs(cell.get("setting", ""))})
                row["status"] = Status.COMPLETED.value
                scale = PERCENT.get(cell["metric"], 100.0)
                row[f"summary.{cell['metric']}"] = np.nan if value is None else value / scale
                row["evidence"] = rec["id"]
                row[_CELL] = (rec["preset"], cell["row"], cell.get("setting", ""), cell["metric"], int(seed))
                row[_CURRENT] = not rec.get("setup")
                rows.append(row)
    return _current_first(pd.DataFrame(rows))


_CELL, _CURRENT = "_cell", "_current"  # evidence_runs' bookkeeping columns, dropped before it returns


def _current_first(runs: pd.DataFrame) -> pd.DataFrame:
    """``runs`` less each older-setup run of a cell's seed that a run of the current setup also holds."""
    if runs.empty:
        return runs
    current = set(runs.loc[runs[_CURRENT], _CELL])
    keep = runs[_CURRENT] | ~runs[_CELL].isin(current)
    return runs[keep].drop(columns=[_CELL, _CURRENT]).reset_index(drop=True)
