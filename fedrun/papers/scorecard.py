"""The reproduction scorecard: each published cell of a target's tables beside ours (``fedrun-report --paper``).

The papers' cells ship as data (``fedrun/papers/cells/<paper>.csv``: paper, table, row, column, value, spread,
and how to find our runs of the cell: the summary ``metric``, the ``preset`` and the ``setting``, config
``key=value`` pairs joined by ``;``). A cell of ours is the mean over seeds of the runs of the cell's preset,
method row (``tags.method``, or the row's overrides in :mod:`fedrun.papers.targets`) and setting, times 100 for
accuracies. A cell is *reproduced* when it is within 1.5 points of the paper's, or within our spread over
seeds (sample std). Runs on stand-in data (``summary.data_standin``) are never compared. For each column the
card says whether the paper's order of the methods we ran holds in ours.

Evidence records (``fedrun/papers/evidence/*.json``) keep full-length cells run on real data (command, commit,
seeds, wall time, load, the numbers); :func:`evidence_runs` turns them into runs the same card reads.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from importlib import resources
from io import StringIO
from typing import Any

import numpy as np
import pandas as pd

from fedrun.papers.targets import Method, Target
from fedrun.report.provenance import STANDIN

TOLERANCE = 1.5  # points: a cell within this of the paper's is reproduced
LOWER_IS_BETTER = {"round_to_target"}
PERCENT = {"round_to_target": 1.0}  # metrics not in [0, 1] (others are scaled by 100)
PAPERS = ("FedIMA", "FedGAM", "FedCos", "FedLAW", "FedSAM")
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
    """Our value of one cell: mean and sample std over seeds (``n`` runs), or why there is none."""

    mean: float = float("nan")
    std: float = float("nan")
    n: int = 0
    note: str = ""


def our_cell(runs: pd.DataFrame, target: Target, cell: pd.Series) -> Ours:
    """Our value of ``cell`` from ``runs`` (completed runs on real data only)."""
    if not cell["metric"] or not cell["preset"]:
        return Ours(note="not a run metric" if cell["preset"] else "no preset runs this setting")
    mask = _preset_mask(runs, cell["preset"]) & _method_mask(runs, target, cell["row"], cell["preset"])
    mask &= _match(runs, setting_pairs(cell["setting"]))
    mine = runs[mask]
    if mine.empty:
        return Ours(note="not run")
    if STANDIN in mine:
        real = mine[~mine[STANDIN].eq(True)]
        if real.empty:
            return Ours(note="stand-in data: not compared")
        mine = real
    mine = mine[mine["status"] == "completed"] if "status" in mine else mine
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
    v = v * PERCENT.get(cell["metric"], 100.0)
    return Ours(float(v.mean()), float(v.std(ddof=1)) if len(v) > 1 else float("nan"), len(v))


def reproduced(ours: float, std: float, paper: float) -> bool:
    """Within 1.5 points of the paper's value, or within our seed spread."""
    diff = abs(ours - paper)
    return diff <= TOLERANCE + 1e-9 or (not math.isnan(std) and diff <= std)


def scorecard(runs: pd.DataFrame, target: Target) -> pd.DataFrame:
    """One line per published cell of ``target``'s presets that our runs cover (and, as notes, those on
    stand-in data): table, row, column, ours, ours_std, n, paper, difference, reproduced, note."""
    cells = load_cells(target.paper)
    cells = cells[cells["preset"].isin(target.presets)]
    lines = []
    for _, cell in cells.iterrows():
        ours = our_cell(runs, target, cell)
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
        }
        lines.append(line)
    return pd.DataFrame(lines, columns=list(lines[0]) if lines else None)


def orders(card: pd.DataFrame) -> pd.DataFrame:
    """Per (table, column) with two or more methods of ours: the paper's order of those methods (best first)
    and whether ours is the same."""
    out = []
    have = card[card["n"] > 0] if not card.empty else card
    for (table, column), grp in have.groupby(["table", "column"], sort=False):
        grp = grp.dropna(subset=["paper", "ours"])
        if len(grp) < 2:
            continue
        low = grp["metric"].iloc[0] in LOWER_IS_BETTER
        paper = list(grp.sort_values("paper", ascending=low, kind="stable")["row"])
        ours = list(grp.sort_values("ours", ascending=low, kind="stable")["row"])
        out.append({"table": table, "column": column, "paper order": " > ".join(paper), "holds": paper == ours})
    return pd.DataFrame(out, columns=["table", "column", "paper order", "holds"])


def _num(v: float, fmt: str = "{:.2f}") -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else fmt.format(v)


def render_card(card: pd.DataFrame, order: pd.DataFrame, target: Target) -> str:
    """The card as Markdown: cells (ours | paper | difference | reproduced), then the column orders."""
    head = f"Scorecard: {target.name} ({target.paper})"
    if card.empty:
        return f"{head}\n\nno run of these runs is a cell of {target.name}'s tables"
    rows = []
    for _, c in card.iterrows():
        ours = _num(c["ours"]) + (f" ± {c['ours_std']:.2f}" if not math.isnan(c["ours_std"]) else "")
        rows.append(
            {
                "table": c["table"],
                "row": c["row"],
                "column": c["column"],
                "ours": ours if c["n"] else c["note"],
                "paper": _num(c["paper"]),
                "difference": _num(c["difference"], "{:+.2f}") if c["n"] else "-",
                "reproduced": ("yes" if c["reproduced"] else "no") if c["n"] else "-",
                "seeds": int(c["n"]),
            }
        )
    compared = card[card["n"] > 0]
    text = [head, "", pd.DataFrame(rows).to_markdown(index=False, disable_numparse=True), ""]
    text.append(
        f"reproduced: {int(compared['reproduced'].sum())} of {len(compared)} compared cells "
        f"(within {TOLERANCE} points or our seed spread); cells on stand-in data are not compared"
    )
    if not order.empty:
        text += ["", order.assign(holds=order["holds"].map({True: "yes", False: "no"})).to_markdown(index=False)]
    return "\n".join(text)


# ---- evidence records ----------------------------------------------------------------------------------


def load_evidence() -> list[dict[str, Any]]:
    """The evidence records shipped with fedrun (``fedrun/papers/evidence/*.json``), by file name."""
    root = resources.files("fedrun.papers") / "evidence"
    names = sorted(p.name for p in root.iterdir() if p.name.endswith(".json"))
    return [json.loads((root / n).read_text(encoding="utf-8")) for n in names]


def evidence_runs(records: list[dict[str, Any]] | None = None) -> pd.DataFrame:
    """The records' runs as rows :func:`scorecard` reads: ``tags.preset``, ``tags.method``, the setting's keys,
    ``seed``, ``status`` and ``summary.<metric>`` (a fraction, as a summary holds it)."""
    rows = []
    for rec in load_evidence() if records is None else records:
        for cell in rec["cells"]:
            for seed, value in cell["values"].items():
                row: dict[str, Any] = {"tags.preset": rec["preset"], "tags.method": cell["row"], "seed": int(seed)}
                row.update({k: v for k, v in setting_pairs(cell.get("setting", ""))})
                row["status"] = "completed"
                scale = PERCENT.get(cell["metric"], 100.0)
                row[f"summary.{cell['metric']}"] = np.nan if value is None else value / scale
                row["evidence"] = rec["id"]
                rows.append(row)
    return pd.DataFrame(rows)
