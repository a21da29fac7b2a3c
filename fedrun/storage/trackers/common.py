"""What every tracker shares: the numbers of a metrics row, the flattened config, and ``tracking.json`` in the run
directory, which remembers each tracker's run id and the last round it logged so that a resumed run continues the
same tracker run and never logs a round twice."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from fedrun.storage.atomic import write_json
from fedrun.storage.rundir import SUMMARY_FILE, TRACKING_FILE

STATE_FILE = TRACKING_FILE


def scalars(row: dict[str, Any]) -> dict[str, float]:
    """The finite numeric values of a metrics row, ``round`` excluded (it is the step)."""
    out = {}
    for k, v in row.items():
        if k == "round" or isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        if math.isfinite(float(v)):
            out[k] = float(v)
    return out


def flatten(config: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """The config as ``{"fl.rounds": "8", ...}``: one dotted key per leaf, values as their text (lists too)."""
    out: dict[str, str] = {}
    for k, v in config.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(flatten(v, key + "."))
        else:
            out[key] = str(v)
    return out


class TrackerState:
    """One tracker's entry in ``<run_dir>/tracking.json`` (its run id, store, last logged round).

    ``config`` (the run's resolved config) bounds what the entry may claim: an entry whose last round lies beyond
    the run's ``fl.rounds`` was not written by this run (a copied or edited file) and counts as none, so the
    tracker starts a new run and logs every round instead of silently skipping them all.
    """

    def __init__(self, run_dir: Path, name: str, config: dict[str, Any] | None = None) -> None:
        self.file = run_dir / STATE_FILE
        self.name = name
        entry = self._read().get(name, {})
        self.values: dict[str, Any] = entry if isinstance(entry, dict) else {}
        rounds = ((config or {}).get("fl") or {}).get("rounds")
        if isinstance(rounds, int) and self.last_round > rounds:
            self.values = {}

    def _read(self) -> dict[str, Any]:
        try:
            blob = json.loads(self.file.read_text(encoding="utf-8"))
        except (OSError, ValueError):  # none yet, or a torn file of a killed run: start a new tracker run
            return {}
        return blob if isinstance(blob, dict) else {}

    @property
    def last_round(self) -> int:
        """The last round this tracker logged in an earlier attempt of the run (0: none)."""
        value = self.values.get("last_round", 0)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    def save(self, **values: Any) -> None:
        """Update this tracker's entry (the other trackers' entries are kept)."""
        self.values.update(values)
        blob = self._read()
        blob[self.name] = self.values
        write_json(self.file, blob)


def status_of(summary: dict[str, Any]) -> str:
    """The run's end as ``completed``, ``interrupted``, ``diverged`` or ``failed``."""
    status = summary.get("status")
    return status if isinstance(status, str) else "failed"


def artifacts(run_dir: Path) -> list[Path]:
    """The files a tracker attaches at the end: summary.json and the plots."""
    files = [run_dir / SUMMARY_FILE, *sorted(run_dir.glob("*.png"))]
    return [f for f in files if f.is_file() and not f.is_symlink()]
