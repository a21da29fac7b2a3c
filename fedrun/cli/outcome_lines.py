"""How an attempt at a run ended, told: one line on stderr (or a sweep's job line), and a single run's summary table.
fedrun/cli/main.py maps the same outcome to the exit code.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from fedrun.cli import sweeps
from fedrun.run.attempt import AttemptResult, Outcome, resume_hint
from fedrun.run.summary import last_k_words
from fedrun.storage.summary import Summary


def print_summary(s: Summary, console: Console) -> None:
    """The summary table of a single run that ran."""
    words = s.fields.get("capabilities")  # what the run is beyond its method (fedrun/capabilities/), in words
    what = f"{s.algorithm} / {s.data} / {s.model} / {s.partition}" + (f", {words}" if isinstance(words, str) else "")
    t = Table(title=f"fedrun: {what}  ({s.status})")
    t.add_column("metric")
    t.add_column("value", justify="right")
    pct = lambda v: "-" if v is None else f"{100 * v:.2f}%"  # noqa: E731
    t.add_row("final test accuracy", pct(s.test_acc_final))
    step = str(s.fields.get("step", "round"))  # an async server's "server update"
    t.add_row(last_k_words(s.last_k, step), pct(s.test_acc_last_k))
    best_round = "-" if s.best_round is None else s.best_round
    t.add_row(f"best test accuracy ({step})", f"{pct(s.test_acc_best)} ({best_round})")
    if "round_to_target" in s.fields:
        t.add_row("round reaching target", str(s.round_to_target or "never"))
    lines = s.fields.get("capability_lines")  # each capability's rows: epsilon spent, personalised accuracy...
    for row in lines if isinstance(lines, list) else []:
        if isinstance(row, list) and len(row) == 2:
            t.add_row(str(row[0]), str(row[1]))
    t.add_row(f"{step}s", str(s.rounds_completed))
    t.add_row("wall time", f"{s.wall_time_s or 0.0:.1f} s")
    t.add_row("client samples/s", f"{s.samples_per_s or 0.0:,.0f}")
    t.add_row("engine / device", f"{s.engine} / {s.device}")
    if s.data_standin:
        t.add_row("data", f"STAND-IN: {s.data} files not found, seeded random data (data.standin)")
    console.print(t)
    console.print(f"run directory: {s.run_dir}")


def waiting(name: str) -> Callable[[int], None]:
    """What a sweep's job says when another process (a twin sweep into the same dir) holds its run dir."""

    def wait(pid: int) -> None:
        print(f"fedrun: {name}: waiting for fedrun process {pid}, which holds its run dir", file=sys.stderr)

    return wait


def tell(result: AttemptResult, run_dir: Path, multirun: bool, name: str) -> None:
    """How an attempt ended, in one line on stderr (and a completed single run's summary table)."""
    outcome, summary = result.outcome, result.summary
    if outcome in (Outcome.REFUSED, Outcome.BUSY, Outcome.UNWRITABLE, Outcome.WRITE_FAILED):
        print(f"fedrun: error: {result.message}", file=sys.stderr)
    elif outcome in (Outcome.SKIPPED, Outcome.SKIPPED_DIVERGED):
        if not (multirun and sweeps.reporting()):  # a sweep's console shows the skip
            print(f"fedrun: {name}: already {result.status}; skipped (a new run needs a new run dir)", file=sys.stderr)
    elif summary is None:  # failed, or interrupted, before the run had a summary
        if outcome is Outcome.FAILED:
            print(f"fedrun: job failed: {result.message}", file=sys.stderr)
        elif not multirun:  # the sweep's one line names the job (main)
            print(f"fedrun: {name}: interrupted by {result.signal}; {resume_hint(run_dir)}", file=sys.stderr)
    else:
        _tell_ran(result, summary, run_dir, multirun, name)


def _tell_ran(result: AttemptResult, fields: Mapping[str, Any], run_dir: Path, multirun: bool, name: str) -> None:
    s = Summary.of(fields)
    if multirun and not sweeps.reporting():  # a sweep's console shows how each job ended
        acc = s.test_acc_last_k
        shown = "-" if acc is None else f"{100 * acc:.2f}%"
        print(f"{name}: {s.status}, last-k acc {shown}", flush=True)
    elif not result.quiet:
        print_summary(s, Console())
    if result.outcome is Outcome.INTERRUPTED:
        if not multirun:
            done = s.fields.get("checkpoint_round")
            saved = f" (checkpoint of round {done} saved)" if done else ""
            print(f"fedrun: {name}: {s.error}{saved}; {resume_hint(run_dir)}", file=sys.stderr)
    elif result.outcome is not Outcome.COMPLETED:
        print(f"fedrun: {name}: {s.status}: {s.error or ''}", file=sys.stderr)
