"""Where a run's per-round results go as they happen: metrics.csv, client_weights.csv, the trackers and the
progress bar."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from fedrun.config import RunSpec
from fedrun.metrics.client_weights import CLIENT_WEIGHTS_FILE
from fedrun.outputs import write_metrics
from fedrun.run_state import RunState
from fedrun.tracking import Trackers


class RoundMonitor:
    """A context manager around the round loop: records evaluated rows and client weights to their files and
    trackers, and draws the progress bar (off with ``output.quiet``)."""

    def __init__(self, spec: RunSpec, run_dir: Path, st: RunState, console: Console) -> None:
        self.spec, self.run_dir, self.st = spec, run_dir, st
        self.trackers = Trackers.open(spec.tracking.tensorboard, run_dir)
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[acc]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=console,
            disable=spec.output.quiet,
            transient=False,
        )
        self.task = self.progress.add_task(
            f"{spec.algorithm.name} rounds", total=spec.fl.rounds, completed=st.start, acc=""
        )

    def __enter__(self) -> RoundMonitor:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.progress.__exit__(*exc)  # type: ignore[arg-type]
        finally:
            self.trackers.close()

    def weights(self, rows: list[dict[str, Any]]) -> None:
        """Append a round's client-weight rows to client_weights.csv (``eval.client_weights``)."""
        if rows:
            self.st.weight_log += rows
            write_metrics(self.run_dir / CLIENT_WEIGHTS_FILE, self.st.weight_log)

    def record(self, row: dict[str, Any]) -> None:
        """An evaluated round: into the run's rows, metrics.csv, the trackers and the bar."""
        self.st.rows.append(row)
        write_metrics(self.run_dir / "metrics.csv", self.st.rows)
        self.trackers.log(row)
        self.progress.update(self.task, acc=f"acc {row['test_acc']:.4f}")

    def advance(self) -> None:
        self.progress.advance(self.task)
