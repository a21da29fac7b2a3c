"""Where a run's per-round results go as they happen: metrics.csv, client_weights.csv, the trackers, the log
and the progress bar.

fedrun logs through ``logging`` (the ``fedrun`` logger): :func:`run_log` sends it to ``fedrun.log`` in the run
directory (appended, so a resumed run continues it) and, in a multirun, to stderr with the job's label, so a
Slurm or joblib log shows each job's progress. The log holds a line when the run starts, one per evaluated
round and the summary. An interactive single run shows the Rich progress bar on the terminal instead.
"""

from __future__ import annotations

import errno
import logging
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from fedrun.config.schema import RunSpec
from fedrun.core.errors import ConfigError, DataError, DivergenceError, ResumeError
from fedrun.metrics.client_weights import CLIENT_WEIGHTS_FILE
from fedrun.run.state import RunState
from fedrun.storage.atomic import WriteError, write_metrics
from fedrun.storage.rundir import LOG_FILE as LOG_FILE
from fedrun.storage.rundir import METRICS_FILE, ROW_RECORD, RunDir
from fedrun.storage.tracking import Trackers

log = logging.getLogger("fedrun")


class _QuietFileHandler(logging.FileHandler):
    """A log file whose write errors (a full disk) are not printed as tracebacks: the run's next atomic write
    reports the same error in one line."""

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - logging's name
        pass


# the threads with a run log open (how many each) and the logger's settings before the first
_OPEN: dict[str, Any] = {"owners": {}, "saved": None}


class _OwnLines(logging.Filter):
    """A run log's filter: the lines of the thread that opened it, and of threads that opened none (the run's
    helpers). Several runs with their logs open at once (a stacked sweep's jobs, in turns: fedrun/host/turns.py) each
    keep their own lines; a lone run is unchanged."""

    def __init__(self) -> None:
        super().__init__()
        self.owner = threading.get_ident()

    def filter(self, record: logging.LogRecord) -> bool:
        return record.thread == self.owner or record.thread not in _OPEN["owners"]


@contextmanager
def run_log(run_dir: Path | RunDir, echo: str | None = None) -> Iterator[logging.Logger]:
    """For the ``with`` block: the ``fedrun`` logger writes to ``<run_dir>/fedrun.log`` and, with ``echo`` (a job
    label), to stderr as ``<label>: <message>``. An exception leaving the block is logged as the run's end, unless it
    is bad input (refused in one line, with the run directory left as it was), an interrupt (the run logs it), or it
    came before a :class:`RunDir` given here started the run (nothing of the run is this process's to write)."""
    rd = run_dir if isinstance(run_dir, RunDir) else None
    run_dir = rd.path if rd else Path(run_dir)
    try:
        if (run_dir / LOG_FILE).is_symlink():  # RunDir.check_links refuses one leaving the run dir; follow none
            raise OSError(errno.ELOOP, "it is a symlink; fedrun never appends through one")
        file = _QuietFileHandler(run_dir / LOG_FILE, mode="a", encoding="utf-8")
    except OSError as e:
        raise WriteError(run_dir / LOG_FILE, e) from None
    file.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%Y-%m-%d %H:%M:%S"))
    handlers: list[logging.Handler] = [file]
    if echo is not None:
        stream = logging.StreamHandler(sys.stderr)
        stream.setFormatter(logging.Formatter(echo.replace("%", "%%") + ": %(message)s"))
        handlers.append(stream)
    own = _OwnLines()
    if not _OPEN["owners"]:
        _OPEN["saved"] = (log.level, log.propagate)
    _OPEN["owners"][own.owner] = _OPEN["owners"].get(own.owner, 0) + 1
    log.setLevel(logging.INFO)
    log.propagate = False  # not again through the root logger's handlers (Hydra's, a launcher's)
    for h in handlers:
        h.addFilter(own)
        log.addHandler(h)
    try:
        yield log
    except BaseException as e:
        bad_input = isinstance(e, KeyboardInterrupt | SystemExit | ConfigError | DataError | ResumeError)
        if not bad_input and (rd is None or rd.started):
            log.error("failed: %s: %s", type(e).__name__, e)
        raise
    finally:
        for h in handlers:
            log.removeHandler(h)
            h.close()
        _OPEN["owners"][own.owner] -= 1
        if not _OPEN["owners"][own.owner]:
            del _OPEN["owners"][own.owner]
        if not _OPEN["owners"]:  # the last run log open: the logger as it was before the first
            level, log.propagate = _OPEN["saved"]
            log.setLevel(level)


def round_line(row: dict[str, Any], rounds: int) -> str:
    """The log line of an evaluated round: round, test (and train) accuracy and loss, local loss, time."""
    parts = [f"test_acc {row['test_acc']:.4f}", f"test_loss {row['test_loss']:.4f}"]
    if "train_acc" in row:
        parts.append(f"train_acc {row['train_acc']:.4f}")
    if "local_loss" in row:
        parts.append(f"local_loss {row['local_loss']:.4f}")
    if "seconds" in row:
        parts.append(f"{row['seconds']:.1f} s")
    return f"round {row['round']}/{rounds}: " + ", ".join(parts)


class RoundMonitor:
    """A context manager around the round loop: records evaluated rows and client weights to their files and
    trackers, and draws the progress bar (off with ``output.quiet``)."""

    def __init__(self, spec: RunSpec, run_dir: Path, state: RunState, console: Console) -> None:
        self.spec, self.run_dir, self.st = spec, run_dir, state
        self.trackers = Trackers.open(spec.tracking, run_dir, spec.raw)
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
            f"{spec.algorithm.name} rounds", total=spec.fl.rounds, completed=state.start, acc=""
        )

    def __enter__(self) -> RoundMonitor:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.progress.__exit__(*exc)  # type: ignore[arg-type]
        finally:
            # a diverged or interrupted run still ends with a summary (finish); any other error ends it here
            if exc[0] is not None and not issubclass(exc[0], (DivergenceError, KeyboardInterrupt)):  # type: ignore[arg-type]
                self.trackers.close()

    def finish(self, summary: dict[str, Any]) -> None:
        """The run ended with ``summary`` (in summary.json): the trackers attach it and the plots, and end."""
        try:
            self.trackers.finish(self.run_dir, summary)
        finally:
            self.trackers.close()

    def weights(self, rows: list[dict[str, Any]]) -> None:
        """Append a round's client-weight rows to client_weights.csv (``eval.client_weights``)."""
        if rows:
            write_metrics(self.run_dir / CLIENT_WEIGHTS_FILE, [*self.st.weight_log, *rows])
            self.st.weight_log += rows

    def record(self, row: dict[str, Any]) -> None:
        """An evaluated round: into metrics.csv, then the run's rows (so the summary never counts a row the file
        lacks), the trackers, the log and the bar."""
        write_metrics(self.run_dir / METRICS_FILE, [*self.st.rows, row])
        self.st.rows.append(row)
        self.trackers.log(row)
        log.info(round_line(row, self.spec.fl.rounds), extra={ROW_RECORD: row})
        self.progress.update(self.task, acc=f"acc {row['test_acc']:.4f}")

    def advance(self) -> None:
        self.progress.advance(self.task)
