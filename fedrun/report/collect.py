"""Gather run directories (a multirun or any set of runs) into one DataFrame: config keys + summary.

A run directory whose ``summary.json`` or ``config.yaml`` cannot be read (truncated, not JSON/YAML, the wrong
shape) is not a row: :func:`collect_runs` returns it apart, as unreadable, so a report can list it under the
table of the others. A run refused on bad input (``error.txt`` beside Hydra's record, no summary) has status
``refused``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from fedrun.config.identity import saved_config_key
from fedrun.core.errors import ConfigError
from fedrun.core.safe_yaml import load_yaml
from fedrun.storage.rundir import ERROR_FILE, SUMMARY_FILE, RunDir, Summary

# columns of load_runs' frame that are not config keys
META = ("status", "error", "run_dir", "fingerprint")
# top-level config sections and data keys that do not change results (as fedrun.config.identity.comparable;
# these name the columns of the report's frame, the identity itself is config_key's)
VOLATILE_PREFIXES = ("output.", "checkpoint.", "tracking.", "data.root", "data.download", "hydra.")
VOLATILE_KEYS = ("output", "checkpoint", "tracking", "cache_dir")


@dataclass(frozen=True)
class Unreadable:
    """A run directory the report could not read, and why."""

    run_dir: str
    why: str


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested config -> dotted keys; a group node with a ``name`` is also reachable by the group name."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            if "name" in v:
                out[key] = _hashable(v["name"])
            out.update(flatten(v, key + "."))
        else:
            out[key] = _hashable(v)
    return out


def _hashable(v: Any) -> Any:
    if isinstance(v, list):
        return tuple(_hashable(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((str(k), _hashable(x)) for k, x in v.items()))
    return v


def config_columns(runs: pd.DataFrame) -> list[str]:
    """The columns of ``runs`` that are config keys deciding results (not summary, status or volatile keys)."""
    return [
        c
        for c in runs.columns
        if not c.startswith("summary.")
        and c not in META
        and c not in VOLATILE_KEYS
        and not c.startswith(VOLATILE_PREFIXES)
    ]


def natural_key(path: Path) -> list[str | int]:
    """Sort key that orders numbered job folders numerically (.../2 before .../10): Hydra's sweep order."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(path))]


def find_runs(paths: list[Path]) -> list[Path]:
    """Every run directory (one holding summary.json or error.txt) below ``paths``, in sweep order."""
    runs: set[Path] = set()
    for p in paths:
        for marker in (SUMMARY_FILE, ERROR_FILE):
            runs.update(f.parent for f in p.rglob(marker))
    return sorted(runs, key=natural_key)


def _hydra_overrides(run: Path) -> dict[str, Any]:
    """The job's Hydra overrides (``.hydra/overrides.yaml``); {} when absent or unreadable (labels only)."""
    f = run / ".hydra" / "overrides.yaml"
    try:
        items = load_yaml(f.read_text(), str(f), plain=True) if f.is_file() else []
        out = {}
        for item in items if isinstance(items, list) else []:
            k, _, v = str(item).partition("=")
            out[k.lstrip("+~")] = _hashable(load_yaml(v, str(f), plain=True)) if v else v
        return out
    except (OSError, UnicodeDecodeError, ConfigError):  # ConfigError: malformed YAML or a YAML bomb
        return {}


def _read_config(run: Path) -> dict[str, Any]:
    """config.yaml (or, for a refused job, Hydra's .hydra/config.yaml); {} when neither exists. Raises ValueError
    (:class:`~fedrun.storage.rundir.UnreadableRunFile`, naming the file) when it cannot be read."""
    return RunDir(run).read_config(hydra_record=True) or {}


def _read_summary(run: Path) -> Summary | None:
    """summary.json (any format this fedrun reads); raises ValueError naming it when it cannot be read."""
    return RunDir(run).read_summary()


def _short(e: BaseException) -> str:
    return " ".join(str(e).split())[:200] or type(e).__name__


def read_run(run: Path) -> dict[str, Any]:
    """One run's row: flattened config, ``summary.*`` fields, status, error, directory and fingerprint.

    Raises ValueError (naming the file) when the run's config or summary cannot be read.
    """
    cfg = _read_config(run)
    row: dict[str, Any] = flatten(cfg)
    row.update({k: v for k, v in _hydra_overrides(run).items() if k not in row})
    s = _read_summary(run)
    if s is not None:
        row.update({f"summary.{k}": _hashable(v) for k, v in s.fields.items() if not isinstance(v, dict)})
        row["status"] = s.status or "unknown"
        row["error"] = s.fields.get("error")
    else:
        row["status"] = "refused"  # bad input: error.txt (exit 2), the run never started
        try:
            row["error"] = RunDir(run).error_file.read_text(errors="replace").strip()
        except OSError as e:
            row["error"] = f"{ERROR_FILE}: {_short(e)}"
    if row["status"] == "running":
        row["status"] = "unfinished"
    row["run_dir"] = str(run)
    row["fingerprint"] = saved_config_key(cfg)[:16] if cfg else f"dir:{run}"
    return row


def collect_runs(paths: list[Path]) -> tuple[pd.DataFrame, list[Unreadable]]:
    """(one row per readable run, the unreadable run directories with the reason)."""
    rows, bad = [], []
    for run in find_runs(paths):
        try:
            rows.append(read_run(run))
        except ValueError as e:
            bad.append(Unreadable(str(run), str(e)))
    return pd.DataFrame(rows), bad


def load_runs(paths: list[Path]) -> pd.DataFrame:
    """One row per readable run: flattened config, summary fields, status, error and directory."""
    return collect_runs(paths)[0]


def run_labels(paths: list[Path]) -> list[str]:
    """Plot labels for run directories (or checkpoint files): the method (``tags.method``, else the algorithm),
    with the config keys that tell runs of the same method apart; the folder name when no config is readable."""
    rows = []
    for p in paths:
        d = p if p.is_dir() else p.parent
        try:
            rows.append(flatten(_read_config(d)))
        except ValueError:
            rows.append({})
    base = [str(r.get("tags.method") or r.get("algorithm") or (p.name or p)) for r, p in zip(rows, paths, strict=True)]
    labels = list(base)
    for name in set(base):
        same = [i for i, b in enumerate(base) if b == name]
        if len(same) < 2:
            continue
        frame = pd.DataFrame([rows[i] for i in same])
        keys = [c for c in config_columns(frame) if frame[c].astype(str).nunique() > 1 and c != "tags.method"]
        for i, (_, r) in zip(same, frame.iterrows(), strict=True):
            extra = ", ".join(f"{k}={r[k]}" for k in keys[:3]) or Path(paths[i]).name
            labels[i] = f"{name} ({extra})"
    return labels
