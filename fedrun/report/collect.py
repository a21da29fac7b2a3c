"""Gather run directories (a multirun or any set of runs) into one DataFrame: config keys + summary.

A run directory whose ``summary.json`` or ``config.yaml`` cannot be read (truncated, not JSON/YAML, the wrong
shape) is not a row: :func:`collect_runs` returns it apart, as unreadable, so a report can list it under the
table of the others. A run refused on bad input (``error.txt`` beside Hydra's record, no summary) has status
``refused``.

A report never shows a number a run did not produce, so two more kinds of folder are left out:

- **foreign**: not recognisably fedrun's. Its config (``config.yaml``, or Hydra's record of a refused job) must
  exist, hold only fedrun's top-level keys (:func:`~fedrun.config.schema.config_keys`) and name its algorithm
  (``algorithm.name``); a ``summary.json`` alone, or a ``config.yaml`` of ``foo: bar``, is foreign.
- **damaged**: fedrun's, but its summary disagrees with itself or with ``metrics.csv``: a status fedrun never
  writes, an accuracy that is not a number in [0, 1], or (a completed run) a final / best / last-k mean test
  accuracy that differs from the one recomputed from ``metrics.csv`` by more than :data:`TOLERANCE`. A completed
  run of summary format 1 without ``metrics.csv`` is damaged too; one of format 0 (written before the format
  field) without it is read as it is, with the ranges checked.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from fedrun.config.identity import saved_config_key
from fedrun.config.schema import config_keys
from fedrun.core.errors import ConfigError
from fedrun.core.safe_yaml import load_yaml
from fedrun.report.personal_metrics import personal_fields
from fedrun.storage.rundir import CONFIG_FILE, ERROR_FILE, METRICS_FILE, SUMMARY_FILE, RunDir, Summary
from fedrun.storage.status import Status

# columns of load_runs' frame that are not config keys
META = ("status", "error", "run_dir", "fingerprint")
# top-level config sections and data keys that do not change results (as fedrun.config.identity.comparable;
# these name the columns of the report's frame, the identity itself is config_key's)
VOLATILE_PREFIXES = ("output.", "checkpoint.", "tracking.", "data.root", "data.download", "hydra.")
VOLATILE_KEYS = ("output", "checkpoint", "tracking", "cache_dir")


# the top-level keys of a fedrun config (``experiment`` is the preset group Hydra leaves in the composed config)
# how far a summary's accuracy may lie from the one recomputed from metrics.csv (both are float64 written as text)
TOLERANCE = 1e-6
# the summary's accuracies checked against metrics.csv: field -> how metrics.csv's test_acc column gives it
RECOMPUTED = ("test_acc_final", "test_acc_best", "test_acc_last_k")

UNREADABLE, DAMAGED, FOREIGN = "unreadable", "damaged", "foreign"


@dataclass(frozen=True)
class Unreadable:
    """A run directory the report left out, and why: ``kind`` is ``unreadable`` (a run file cannot be read),
    ``damaged`` (fedrun's, but its summary disagrees with its ranges or metrics.csv) or ``foreign`` (not a run of
    fedrun's)."""

    run_dir: str
    why: str
    kind: str = UNREADABLE


class NotARun(ValueError):
    """A folder that is not recognisably a fedrun run (``foreign``) or a run whose numbers disagree (``damaged``);
    the message names the file and the field."""

    def __init__(self, kind: str, why: str) -> None:
        super().__init__(why)
        self.kind = kind


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
    f = RunDir(run).hydra_overrides_file
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


def foreign_config(cfg: dict[str, Any]) -> str | None:
    """Why the config ``cfg`` (read from a run dir; {} when there is none) is not fedrun's; None when it is."""
    if not cfg:
        return f"{CONFIG_FILE}: none (a fedrun run writes it when it starts)"
    known = config_keys()
    unknown = sorted(str(k) for k in cfg if k not in known)
    if unknown:
        return f"{CONFIG_FILE}: '{unknown[0]}' is not a fedrun config key"
    algorithm = cfg.get("algorithm")
    if not isinstance(algorithm, dict) or not isinstance(algorithm.get("name"), str):
        return f"{CONFIG_FILE}: no algorithm.name"
    return None


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _is_accuracy(key: str) -> bool:
    """A summary field holding an accuracy (a fraction): test_acc_*, train_acc_*, client_acc_*, a backdoor's asr_*."""
    return key.startswith(("test_acc_", "train_acc_", "client_acc_", "asr_"))


def _last_k(s: Summary, cfg: dict[str, Any]) -> int:
    """The k of the summary's last-k mean: its ``last_k`` field, else the config's ``eval.last_k``, else 10."""
    ev = cfg.get("eval")
    for k in (s.last_k, ev.get("last_k") if isinstance(ev, dict) else None):
        if isinstance(k, int) and not isinstance(k, bool) and k > 0:
            return k
    return 10


def damaged_summary(run: Path, s: Summary, cfg: dict[str, Any]) -> str | None:
    """Why the summary ``s`` of ``run`` cannot be believed (naming the file and the field); None when it holds."""
    if s.status is None:
        known = ", ".join(Status)
        return f"{SUMMARY_FILE}: status {s.fields.get('status')!r} is not one fedrun writes ({known})"
    for key, v in s.fields.items():
        if _is_accuracy(key) and v is not None and not (_is_number(v) and 0.0 <= v <= 1.0):
            return f"{SUMMARY_FILE}: {key} = {v!r} is not an accuracy (a number in [0, 1])"
    if not s.completed:
        return None  # its numbers are never shown
    metrics = RunDir(run).metrics_file
    if not metrics.is_file():
        if s.format >= 1:
            return f"{METRICS_FILE}: missing (a completed run writes it; its summary cannot be checked)"
        return None  # a summary of before the format field: read as it is
    try:
        acc = pd.to_numeric(pd.read_csv(metrics)["test_acc"], errors="raise").dropna().to_numpy(dtype=float)
    except (OSError, UnicodeDecodeError, KeyError, ValueError, pd.errors.ParserError) as e:
        return f"{METRICS_FILE}: no test_acc column to check the summary against ({_short(e)})"
    if not len(acc):
        return f"{METRICS_FILE}: no test accuracy, though {SUMMARY_FILE} says the run completed"
    recomputed = {
        "test_acc_final": float(acc[-1]),
        "test_acc_best": float(acc.max()),
        "test_acc_last_k": float(acc[-_last_k(s, cfg) :].mean()),
    }
    for key in RECOMPUTED:
        v = getattr(s, key)
        if v is not None and abs(v - recomputed[key]) > TOLERANCE:
            return f"{SUMMARY_FILE}: {key} = {v!r}, but {METRICS_FILE} gives {recomputed[key]!r}"
    return None


def read_run(run: Path) -> dict[str, Any]:
    """One run's row: flattened config, ``summary.*`` fields, status, error, directory and fingerprint.

    Raises ValueError (naming the file) when the run's config or summary cannot be read, :class:`NotARun` when the
    folder is not a fedrun run or its summary disagrees with its ranges or metrics.csv.
    """
    cfg = _read_config(run)
    why = foreign_config(cfg)
    if why is not None:
        raise NotARun(FOREIGN, why)
    row: dict[str, Any] = flatten(cfg)
    row.update({k: v for k, v in _hydra_overrides(run).items() if k not in row})
    s = _read_summary(run)
    if s is not None and (why := damaged_summary(run, s, cfg)) is not None:
        raise NotARun(DAMAGED, why)
    if s is not None:
        row.update({f"summary.{k}": _hashable(v) for k, v in s.fields.items() if not isinstance(v, dict)})
        row.update(personal_fields(run))  # eval.local_test: the last round's per-client statistics
        row["status"] = s.status.value if s.status else "unknown"
        row["error"] = s.error
    else:
        row["status"] = "refused"  # bad input: error.txt (exit 2), the run never started
        try:
            row["error"] = RunDir(run).error_file.read_text(errors="replace").strip()
        except OSError as e:
            row["error"] = f"{ERROR_FILE}: {_short(e)}"
    if row["status"] == Status.RUNNING:
        row["status"] = "unfinished"
    row["run_dir"] = str(run)
    row["fingerprint"] = saved_config_key(cfg)[:16] if cfg else f"dir:{run}"
    return row


def collect_runs(paths: list[Path]) -> tuple[pd.DataFrame, list[Unreadable]]:
    """(one row per readable fedrun run, the run directories left out: unreadable, damaged or foreign, with why)."""
    rows, bad = [], []
    for run in find_runs(paths):
        try:
            rows.append(read_run(run))
        except NotARun as e:
            bad.append(Unreadable(str(run), str(e), e.kind))
        except ValueError as e:
            bad.append(Unreadable(str(run), str(e)))
    return pd.DataFrame(rows), bad


def load_runs(paths: list[Path]) -> pd.DataFrame:
    """One row per readable fedrun run: flattened config, summary fields, status, error and directory."""
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
