"""Whole runs in a test's folder, read back without their wall-clock columns; and a run killed after its checkpoint
of round ``k``, then resumed in its directory: the shared set-up of the run tests of simulated systems,
asynchronous servers and private runs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from omegaconf import OmegaConf

from fedrun.config.schema import RunSpec
from fedrun.run.checkpoint import CHECKPOINT_FILE
from fedrun.run.loop import run
from fedrun.storage.atomic import TIMING_COLUMNS


def metrics(run_dir: Path) -> pd.DataFrame:
    """A run's metrics.csv without its wall-clock columns."""
    return pd.read_csv(run_dir / "metrics.csv").drop(columns=list(TIMING_COLUMNS))


def finished_run(tmp_path: Path, name: str, spec: RunSpec) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Run ``spec`` in ``tmp_path/name`` to completion: its metrics and its summary."""
    (tmp_path / name).mkdir()
    summary = run(spec, tmp_path / name)
    assert summary["status"] == "completed"
    return metrics(tmp_path / name), summary


def run_in(tmp_path: Path, name: str, spec: RunSpec) -> pd.DataFrame:
    """Run ``spec`` in ``tmp_path/name`` to completion: its metrics."""
    return finished_run(tmp_path, name, spec)[0]


def interrupted_copy(
    spec: RunSpec,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    k: int,
    on_checkpoint: Callable[[Any], None] | None = None,
) -> tuple[Path, Path]:
    """Run ``spec`` whole in ``tmp_path/full``, and leave in ``tmp_path/partial`` what a run killed after round
    ``k``'s checkpoint leaves (``on_checkpoint`` sees that checkpoint first): the two run directories."""
    import fedrun.run.state as runner

    full, partial = tmp_path / "full", tmp_path / "partial"
    full.mkdir()
    partial.mkdir()
    save = runner.save_checkpoint

    def save_and_copy(path: Path, ck: Any) -> None:
        save(path, ck)
        if ck.round == k:
            if on_checkpoint is not None:
                on_checkpoint(ck)
            (partial / CHECKPOINT_FILE).write_bytes(path.read_bytes())
            (partial / "metrics.csv").write_bytes((full / "metrics.csv").read_bytes())

    monkeypatch.setattr(runner, "save_checkpoint", save_and_copy)
    run(spec, full)
    monkeypatch.setattr(runner, "save_checkpoint", save)
    (partial / "config.yaml").write_text(OmegaConf.to_yaml(spec.raw))
    (partial / "summary.json").write_text('{"status": "running"}')
    return full, partial


def killed_then_resumed(
    spec: RunSpec,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    k: int,
    on_checkpoint: Callable[[Any], None] | None = None,
) -> tuple[dict[str, Any], pd.DataFrame, pd.DataFrame]:
    """:func:`interrupted_copy`, then the partial run resumed in its directory. Returns the resumed run's summary
    and both runs' metrics (full, resumed), after checking that it resumed from round ``k`` and completed."""
    full, partial = interrupted_copy(spec, tmp_path, monkeypatch, k, on_checkpoint)
    summary = run(spec, partial)
    assert summary["status"] == "completed" and summary.get("resumed_from_round") == k
    return summary, metrics(full), metrics(partial)
