"""How a sweep shows itself while it runs: its directory at the start and at the end (with the command that makes its
table), and its jobs, as a live table on a terminal or one line per job start and end otherwise (CI, pipes, a log
file). fedrun/cli/sweeps.py's Hydra callback and fedrun/cli/reproduce_sweep.py drive it.
"""

from __future__ import annotations

import logging
import shlex
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedrun.run.sweep_index import job_status
from fedrun.storage.rundir import ROW_RECORD, RunDir
from fedrun.storage.status import Status

ENDED = (Status.COMPLETED, Status.DIVERGED)  # a job that starts in a folder with one of these is skipped


DEFAULT_ROWS = "algorithm"  # fedrun-report table's --rows when none is given
POOLED = ("seed",)  # fedrun-report table's --over: the keys a cell averages over


def table_command(sweep_dir: Path | str, varying: Sequence[str] = ()) -> str:
    """The command that prints a sweep's table, ready to paste: the keys the sweep varies (``varying``, but the seed,
    which a cell averages over) as its rows (the first) and columns (the others). Without them ``fedrun-report
    table`` puts ``algorithm`` in the rows and refuses (exit 2) a table whose cells would mix another varying key."""
    keys = [k for k in dict.fromkeys(varying) if k not in POOLED]
    command = f"fedrun-report table {shlex.quote(str(sweep_dir))}"
    if keys[1:]:
        command += f" --rows {shlex.quote(keys[0])} --cols {shlex.quote(','.join(keys[1:]))}"
    elif keys and keys[0] != DEFAULT_ROWS:
        command += f" --rows {shlex.quote(keys[0])}"
    return command


def job_numbers(nums: Sequence[int]) -> str:
    """Jobs ``nums`` (0-based) as the console numbers them: ``1-5``, ``2, 4, 6``, ``1-3, 7``."""
    runs: list[list[int]] = []
    for n in sorted(n + 1 for n in nums):
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    return ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 2 else ", ".join(map(str, r)) for r in runs)


@dataclass
class Job:
    """One job as the sweep's console shows it."""

    num: int
    name: str
    rounds: int | None = None
    status: str = "running"
    round: int = 0
    acc: float | None = None  # the last evaluated round's test accuracy; once ended, the run's last-k mean
    brief: str = ""  # once ended, what its capabilities say of it in a few words (personalised accuracy, epsilon)
    started: float = 0.0
    seconds: float | None = None
    stack: int | None = None  # the stack it trained in (1, 2...: fedrun/engines/stacked.py), None: alone
    thread: int | None = None  # the thread it runs in (a stack's jobs run in threads of their own, in turns)


class SweepConsole:
    """What a sweep shows while it runs: its directory at the start and the end, and its jobs, as a live table
    (``live``: a terminal) or one line per job start and end (``ends_only``: one line per job end). ``local``: the
    jobs run in this process (so their rounds need no echo on stderr: :func:`round_echo`); ``quiet``: no line at all.

    Round records of the ``fedrun`` logger (fedrun/run/recorder.py puts the row in ``extra``) update the running
    job's round and accuracy."""

    def __init__(
        self,
        sweep_dir: str,
        total: int | None = None,
        console: Any = None,
        live: bool | None = None,
        ends_only: bool = False,
        local: bool = True,
        quiet: bool = False,
    ) -> None:
        from rich.console import Console

        self.sweep_dir, self.total, self.ends_only, self.local, self.quiet = sweep_dir, total, ends_only, local, quiet
        self.varying: list[str] = []  # the keys the sweep varies, for the table's command (set by the sweep)
        self.console = console or Console(highlight=False)
        self.live_mode = self.console.is_interactive if live is None else live
        self.jobs: list[Job] = []
        self.lock = threading.Lock()
        self.live: Any = None
        self.handler = _RoundHandler(self)
        self.streams: list[tuple[logging.StreamHandler[Any], Any]] = []
        self.stacks: dict[int, int] = {}  # job number -> its stack (1, 2...), from :meth:`stacked`

    # -- the sweep
    def start(self, announce: bool = True) -> None:
        """Print the sweep's directory; start the live table on a terminal; follow the round records."""
        if announce:
            count = f"{self.total} jobs" if self.total is not None else "jobs"
            self._say(f"sweep of {count} in {self.sweep_dir}")
        logging.getLogger("fedrun").addHandler(self.handler)
        if self.live_mode:
            from rich.live import Live

            self.live = Live(console=self.console, get_renderable=self.table, refresh_per_second=2, transient=False)
            self.live.start()
            # log handlers that hold the terminal's stream (Hydra's, Optuna's lines) print above the table
            for h in logging.getLogger().handlers:
                if isinstance(h, logging.StreamHandler) and h.stream in (sys.__stdout__, sys.__stderr__):
                    self.streams.append((h, h.setStream(sys.stdout if h.stream is sys.__stdout__ else sys.stderr)))

    def stop(self) -> None:
        """Stop following the sweep (the live table stays on the screen as it was last drawn)."""
        logging.getLogger("fedrun").removeHandler(self.handler)
        for h, stream in self.streams:
            h.setStream(stream)
        self.streams.clear()
        if self.live is not None:
            self.live.stop()
            self.live = None

    def finish(self, counts: dict[str, int] | None = None) -> None:
        """Stop, then one line: how the jobs ended, the sweep's directory and the command that makes its table."""
        self.stop()
        counts = counts if counts is not None else self.counts()
        ended = ", ".join(f"{n} {status}" for status, n in counts.items()) or "no job ran"
        self._say(f"sweep done ({ended}): {self.sweep_dir}; its table: {table_command(self.sweep_dir, self.varying)}")

    def counts(self) -> dict[str, int]:
        """How many of this sweep's jobs ended how (``skipped``: found done), in a fixed order."""
        out: dict[str, int] = {}
        for job in self.jobs:
            out[job.status] = out.get(job.status, 0) + 1
        order = ("completed", "skipped", "diverged", "failed", "refused", "interrupted", "running")
        return {k: out[k] for k in sorted(out, key=lambda k: order.index(k) if k in order else len(order))}

    # -- its stacks
    def stacked(self, nums: Sequence[int]) -> None:
        """Jobs ``nums`` (0-based) train together, stacked (fedrun/engines/stacked.py): one line, and their stack's
        number in the table."""
        stack = max(self.stacks.values(), default=0) + 1
        self.stacks.update({n: stack for n in nums})
        self._say(f"stack {stack}: jobs {job_numbers(nums)} train together, as one vectorised cohort")

    def not_stacked(self, nums: Sequence[int], why: str) -> None:
        """Jobs ``nums`` (0-based) could have trained together but train alone: why, in one line."""
        self._say(f"not stacked: jobs {job_numbers(nums)} train alone ({why})")

    def side_by_side(self, nums: Sequence[int], workers: int, why: str) -> None:
        """Jobs ``nums`` (0-based) run side by side in ``workers`` processes (fedrun/cli/parallel_launch.py): one
        line, and why that many."""
        self._say(f"side by side: jobs {job_numbers(nums)} run in {workers} processes ({why})")

    # -- its jobs
    def job_started(self, num: int, name: str, rounds: int | None, run_dir: Path | None = None) -> Job:
        """A job starts (``run_dir``: its folder, which tells a finished job that will be skipped)."""
        before = RunDir(run_dir).status() if run_dir is not None else None
        job = Job(num, name, rounds, "skipping" if before in ENDED else "running", started=time.monotonic())
        job.stack, job.thread = self.stacks.get(num), threading.get_ident()
        with self.lock:
            self.jobs.append(job)
        if not self.live_mode and not self.ends_only and job.status == "running":
            self._say(f"{self._tag(job)} {name}: started")
        return job

    def job_ended(self, job: Job, run_dir: Path | None, failed: bool = False) -> None:
        """A job ended: its status and accuracy from its folder (``failed``: it raised past fedrun)."""
        status = "failed" if failed or run_dir is None else job_status(run_dir)
        summary = RunDir(run_dir).summary() if run_dir is not None and not failed and status != "refused" else None
        with self.lock:
            skipped = job.status == "skipping"
            job.status = "skipped" if skipped and status in ENDED else status
            job.acc = summary.test_acc_last_k if summary is not None else None
            brief = summary.fields.get("capability_brief") if summary is not None else None
            job.brief = brief if isinstance(brief, str) else ""
            job.seconds = None if skipped else time.monotonic() - job.started
            if summary is not None and summary.rounds_completed is not None:
                job.round = summary.rounds_completed
        if not self.live_mode:
            self._say(self.line(job))

    def line(self, job: Job) -> str:
        """A job's end line: ``[3/4] algorithm=fedprox,seed=0-3fa2c1d0: completed, acc 81.20% (12.5 s)``."""
        acc = ("" if job.acc is None else f", acc {100 * job.acc:.2f}%") + (f", {job.brief}" if job.brief else "")
        if job.status == "skipped":
            return f"{self._tag(job)} {job.name}: skipped (already done{acc})"
        stack = "" if job.stack is None else f", stack {job.stack}"
        took = "" if job.seconds is None else f" ({job.seconds:.1f} s{stack})"
        return f"{self._tag(job)} {job.name}: {job.status}{acc}{took}"

    def round_done(self, row: dict[str, Any], thread: int | None = None) -> None:
        """An evaluated round of the running job of ``thread`` (the latest running job when none is of it)."""
        with self.lock:
            running = [j for j in self.jobs if j.status == "running"]
            own = [j for j in running if j.thread == thread] or running[-1:]
            for job in own[-1:]:
                job.round = int(row.get("round", job.round))
                if isinstance(row.get("test_acc"), float | int):
                    job.acc = float(row["test_acc"])

    def _tag(self, job: Job) -> str:
        return f"[{job.num + 1}/{self.total}]" if self.total else f"[{job.num + 1}]"

    def _say(self, line: str) -> None:
        if self.quiet:
            return
        self.console.print(line, markup=False, highlight=False, soft_wrap=True)

    # -- the live table
    ROWS = 20  # jobs shown in the live table at most: the running ones, then the latest

    def table(self) -> Any:
        from rich.table import Table
        from rich.text import Text

        with self.lock:
            jobs = list(self.jobs)
        counts: dict[str, int] = {}
        for j in jobs:
            counts[j.status] = counts.get(j.status, 0) + 1
        done = sum(n for s, n in counts.items() if s not in ("running", "skipping"))
        bad = sum(counts.get(s, 0) for s in ("failed", "refused", "diverged", "interrupted"))
        running = counts.get("running", 0) + counts.get("skipping", 0)
        left = "" if self.total is None else f", {max(self.total - len(jobs), 0)} queued"
        t = Table(
            title=Text(f"sweep {self.sweep_dir}"),
            caption=f"{done} done ({bad} failed), {running} running{left}",
            title_justify="left",
        )
        for col, justify in (("#", "right"), ("job", "left"), ("status", "left"), ("round", "right")):
            t.add_column(col, justify=justify)  # type: ignore[arg-type]
        t.add_column("acc", justify="right")
        t.add_column("time", justify="right")
        stacks = bool(self.stacks)  # (the column only where some jobs train stacked)
        if stacks:
            t.add_column("stack", justify="right")
        shown = [j for j in jobs if j.status in ("running", "skipping")]
        shown = sorted(shown + [j for j in jobs if j not in shown][-(self.ROWS - len(shown)) :], key=lambda j: j.num)
        if len(jobs) > len(shown):
            t.add_row("", Text(f"... {len(jobs) - len(shown)} earlier jobs"), "", "", "", "", *([""] if stacks else []))
        now = time.monotonic()
        for j in shown:
            rounds = f"{j.round}/{j.rounds}" if j.rounds else str(j.round or "")
            acc = ("" if j.acc is None else f"{100 * j.acc:.2f}%") + (f" ({j.brief})" if j.brief else "")
            secs = j.seconds if j.seconds is not None else (now - j.started if j.status == "running" else None)
            style = {"completed": "green", "skipped": "dim", "running": "bold"}.get(j.status, "red")
            took = "" if secs is None else f"{secs:.0f} s"
            stack = [str(j.stack or "")] if stacks else []
            t.add_row(str(j.num + 1), Text(j.name), Text(j.status, style=style), rounds, acc, took, *stack)
        return t


class _RoundHandler(logging.Handler):
    """Passes the ``fedrun`` logger's round records to a :class:`SweepConsole`."""

    def __init__(self, console: SweepConsole) -> None:
        super().__init__(logging.INFO)
        self.sweep = console

    def emit(self, record: logging.LogRecord) -> None:
        row = getattr(record, ROW_RECORD, None)
        if isinstance(row, dict):
            self.sweep.round_done(row, record.thread)
