"""Gather run directories (a multirun or any set of runs) into one DataFrame: config keys + summary."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pandas as pd
import yaml


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested config -> dotted keys; a group node with a ``name`` is also reachable by the group name."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            if "name" in v:
                out[key] = v["name"]
            out.update(flatten(v, key + "."))
        else:
            out[key] = tuple(v) if isinstance(v, list) else v
    return out


def natural_key(path: Path) -> list[str | int]:
    """Sort key that orders numbered job folders numerically (.../2 before .../10): Hydra's sweep order."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(path))]


def find_runs(paths: list[Path]) -> list[Path]:
    """Every run directory (one holding config.yaml or error.txt, or summary.json) below ``paths``, in sweep order."""
    runs = set()
    for p in paths:
        for marker in ("summary.json", "error.txt"):
            runs.update(f.parent for f in p.rglob(marker))
    return sorted(runs, key=natural_key)


def _hydra_overrides(run: Path) -> dict[str, Any]:
    f = run / ".hydra" / "overrides.yaml"
    if not f.is_file():
        return {}
    out = {}
    for item in yaml.safe_load(f.read_text()) or []:
        k, _, v = str(item).partition("=")
        out[k.lstrip("+~")] = yaml.safe_load(v) if v else v
    return out


def load_runs(paths: list[Path]) -> pd.DataFrame:
    """One row per run: flattened config, summary fields, status, error and directory."""
    rows = []
    for run in find_runs(paths):
        row: dict[str, Any] = {}
        cfg = run / "config.yaml"
        hydra_cfg = run / ".hydra" / "config.yaml"
        if cfg.is_file():
            row.update(flatten(yaml.safe_load(cfg.read_text()) or {}))
        elif hydra_cfg.is_file():
            row.update(flatten(yaml.safe_load(hydra_cfg.read_text()) or {}))
        row.update({k: v for k, v in _hydra_overrides(run).items() if k not in row})
        summary = run / "summary.json"
        if summary.is_file():
            s = json.loads(summary.read_text())
            row.update({f"summary.{k}": v for k, v in s.items() if not isinstance(v, dict)})
            row["status"] = s.get("status", "unknown")
            row["error"] = s.get("error")
        else:
            row["status"] = "failed"
            row["error"] = (run / "error.txt").read_text().strip()
        if row["status"] == "running":
            row["status"] = "unfinished"
        row["run_dir"] = str(run)
        rows.append(row)
    return pd.DataFrame(rows)
