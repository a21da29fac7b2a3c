"""One attempt at a run: its whole life (refuse, skip, extend, resume, lock, run, record the outcome) in one call.

:func:`attempt` validates a composed config, then, holding the run directory's lock (fedrun/storage/lock.py),
skips a run that already finished, extends or resumes an earlier one, or starts a new one, and records how it ended
in the directory. It prints nothing of its own: it returns an :class:`AttemptResult`, whose :class:`Outcome`
``fedrun`` (fedrun/cli/main.py), the in-process sweep runner (fedrun/cli/reproduce_sweep.py) and each job of a
Hydra sweep map to one line and an exit code.

The run directory's contract (fedrun/storage/rundir.py): anything that fails before the run starts
(:meth:`RunDir.start`) is bad input and leaves the directory as it was (a directory that is not empty and holds no
fedrun run is refused first); what a refused attempt removes is only what it wrote while it held the lock, and a
directory another process holds is not touched at all. Once started, Ctrl-C, SIGTERM and SIGHUP end the run as
``interrupted`` (fedrun/host/interrupts.py), and a file that cannot be written ends it naming the file.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shlex
import signal
import traceback
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from fedrun.config.schema import RunSpec
from fedrun.config.validate import validate
from fedrun.core.errors import ConfigError, DataError, ResumeError
from fedrun.host.interrupts import interrupts, signal_name
from fedrun.storage.atomic import WriteError, remove_stale_temps
from fedrun.storage.lock import RunDirBusy
from fedrun.storage.rundir import ERROR_LOG, SUMMARY_FORMAT, RunDir, Summary
from fedrun.storage.status import Status

# write errors that are bad input (the run directory as given cannot hold the run), not a failed run
BAD_DIR_ERRNOS = (errno.EACCES, errno.EPERM, errno.EROFS, errno.ELOOP, errno.EISDIR, errno.ENOTDIR)
# what to do after a signal ended the command (fedrun/host/interrupts.py)
SWEEP_AFTER = "the same command (same hydra.sweep.dir) resumes a sweep"
RUN_AFTER = "nothing had started; run the same command again to start it"


class Outcome(Enum):
    """How an attempt ended."""

    COMPLETED = "completed"  # the run ran to its last round (a new run, a resumed or an extended one)
    DIVERGED = "diverged"  # the run ran and diverged
    INTERRUPTED = "interrupted"  # a signal stopped it (:attr:`AttemptResult.signal`)
    FAILED = "failed"  # the run raised (its traceback in error.log)
    SKIPPED = "skipped"  # the run had completed before: nothing to do
    SKIPPED_DIVERGED = "skipped-diverged"  # the run had diverged before: nothing to do
    REFUSED = "refused"  # bad input: one line, the directory as it was
    BUSY = "busy"  # another process holds the run directory: nothing touched
    UNWRITABLE = "unwritable"  # the run directory cannot hold the run (not writable, a directory in a file's way)
    WRITE_FAILED = "write-failed"  # a run file could not be written (full disk, file size limit)


@dataclass(frozen=True)
class AttemptResult:
    """What :func:`attempt` returns: the outcome, the run's status in summary.json after it, and what to say."""

    outcome: Outcome
    status: Status | None = None  # summary.json's status after the attempt (None: none, or not this attempt's)
    message: str = ""  # the why of a refusal or failure, in one line
    summary: Mapping[str, Any] | None = field(default=None, repr=False)  # the summary of a run that ran
    objective: float | None = None  # the value a sweeper maximises (``output.objective`` of a completed run)
    signal: str | None = None  # the signal that interrupted it (``SIGINT``...)
    quiet: bool = True  # ``output.quiet``: no summary table


def attempt(
    cfg: Any,
    run_dir: Path,
    *,
    multirun: bool = False,
    label: str = "",
    record: str | None = None,
    absolute: Callable[[str], str] = os.path.abspath,
    echo: str | None = None,
    wait: Callable[[int], None] | None = None,
    imports: Collection[str] = (),
    spec: RunSpec | None = None,
) -> AttemptResult:
    """Validate ``cfg`` (a composed config, or its mapping), then start, continue, extend or skip the run in
    ``run_dir``; how it ended.

    ``record``: the folder of Hydra's record of this job (``.hydra``), written for this attempt before it began;
    ``absolute``: how a relative data or cache path is made absolute (Hydra's original working directory);
    ``echo``: the label the run's log lines are echoed to stderr with (a launcher's job); ``wait``: wait for a run
    directory another process holds (``wait(pid)`` says so) instead of :attr:`Outcome.BUSY`; ``imports``: the
    modules the current command named (``imports=[...]``), the only ones validation imports (a run dir's own
    ``imports`` never are: fedrun/config/imports.py); ``spec``: ``cfg`` validated already, with these ``imports``
    (a sweep's planner validated it to see which jobs stack: fedrun/cli/reproduce_sweep.py), not validated again.
    """
    rd = RunDir(run_dir, record=record)
    after: str | Callable[[], str] = SWEEP_AFTER if multirun else lambda: resume_hint(rd.path)  # asked then

    def interrupted(signum: int) -> None:  # the process ends at once (a second signal, or one inside an import)
        rd.set_status(Status.INTERRUPTED, f"interrupted by {signal.Signals(signum).name}", only_running=True)

    with contextlib.ExitStack() as held:  # the run dir's lock, once taken, is held until the outcome is recorded
        try:
            with interrupts(label or str(run_dir), after, on_exit=interrupted):
                lock = lambda: held.enter_context(rd.lock(wait))  # noqa: E731
                return _attempt(rd, cfg, multirun, absolute, echo, lock, imports, spec)
        except RunDirBusy as e:
            rd.restore_record()  # the live run's record, which Hydra overwrote when it launched this attempt
            return AttemptResult(Outcome.BUSY, message=str(e))
        except (ConfigError, DataError, ResumeError) as e:
            return _refused(rd, str(e))
        except WriteError as e:
            return write_failed(rd, e)
        except KeyboardInterrupt as e:  # during start-up or while finishing up: the loop's own come back in summary
            rd.set_status(Status.INTERRUPTED, f"interrupted by {signal_name(e)}", only_running=True)
            return AttemptResult(Outcome.INTERRUPTED, _status(rd), signal=signal_name(e))
        except Exception as e:  # noqa: BLE001 - record the failure, keep a sweep going
            if not rd.started:  # e.g. a config that validation cannot even read: the directory is not this run's
                return _refused(rd, f"{type(e).__name__}: {e}")
            return _failed(rd, e)


def _attempt(
    rd: RunDir,
    cfg: Any,
    multirun: bool,
    absolute: Callable[[str], str],
    echo: str | None,
    lock: Callable[[], object],
    imports: Collection[str],
    spec: RunSpec | None = None,
) -> AttemptResult:
    """:func:`attempt` inside its interrupt handling: the checks, the lock (``lock()`` takes it, for the rest of the
    attempt), then the skip or the run."""
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    rd.check_links(key)
    if rd.foreign():
        raise ConfigError(
            key,
            f"{rd.path} is not empty and holds no fedrun run, so fedrun leaves it as it is;"
            " valid: a new or empty directory, or one of a fedrun run",
        )
    spec = validate(cfg, imports=imports) if spec is None else spec
    spec.data.params.root = absolute(spec.data.params.root)
    spec.cache_dir = absolute(spec.cache_dir) if spec.cache_dir else None
    if multirun:
        spec.output.quiet = True
    from fedrun.run.checkpoint import FINISHED, check_run_dir  # heavy imports after validation
    from fedrun.run.loop import run
    from fedrun.run.recorder import run_log

    lock()
    if spec.cache_dir:
        remove_stale_temps(Path(spec.cache_dir))
    prior = check_run_dir(rd, spec.raw)
    if prior in FINISHED:
        return _skipped(rd, spec, Status(prior))
    with run_log(rd, echo=echo):
        summary = run(spec, rd, announce=echo is None)  # a sweep's job echoes its log line instead
    return _ran(summary, spec)


def _ran(summary: dict[str, Any], spec: RunSpec) -> AttemptResult:
    """The result of a run that ran, from its summary."""
    status = Status.parse(summary.get("status"))
    outcome = {
        Status.COMPLETED: Outcome.COMPLETED,
        Status.DIVERGED: Outcome.DIVERGED,
        Status.INTERRUPTED: Outcome.INTERRUPTED,
    }.get(status, Outcome.FAILED)  # type: ignore[arg-type]
    return AttemptResult(
        outcome,
        status,
        message=str(summary.get("error", "")),
        summary=summary,
        objective=objective(summary, spec),
        signal=summary.get("signal", "SIGINT") if outcome is Outcome.INTERRUPTED else None,
        quiet=spec.output.quiet,
    )


def objective(summary: Mapping[str, Any], spec: RunSpec) -> float | None:
    """The value a completed run returns to a sweeper: summary.json's ``test_acc_<output.objective>``."""
    return Summary(SUMMARY_FORMAT, dict(summary)).test_acc(spec.output.objective)


def _skipped(rd: RunDir, spec: RunSpec, prior: Status) -> AttemptResult:
    """A run that finished before: a completed one's curves drawn when missing, its objective."""
    if prior is not Status.COMPLETED:
        return AttemptResult(Outcome.SKIPPED_DIVERGED, prior, quiet=spec.output.quiet)
    outcome = Outcome.SKIPPED
    redraw_curves(rd, spec)
    done = rd.summary()
    objective = done.test_acc(spec.output.objective) if done else None
    return AttemptResult(outcome, prior, objective=objective, quiet=spec.output.quiet)


def _refused(rd: RunDir, message: str) -> AttemptResult:
    """Bad input: remove only what this attempt wrote (:meth:`RunDir.refuse`)."""
    with contextlib.suppress(OSError):
        rd.refuse(message)
    return AttemptResult(Outcome.REFUSED, _status(rd), message=message)


def write_failed(rd: RunDir, e: WriteError) -> AttemptResult:
    """A run file could not be written: the line names it, its folder and the advice for its errno
    (:func:`~fedrun.storage.atomic.write_advice`). A folder that is not writable or a directory in the way of a
    file is bad input; a full disk, the file size limit (or another I/O error) fails the run, marked in summary.json
    where that can still be written (by the process that started the run only)."""
    if e.errno in BAD_DIR_ERRNOS:
        return AttemptResult(Outcome.UNWRITABLE, _status(rd), message=f"{e}; {e.advice}")
    rd.set_status(Status.FAILED, str(e))
    return AttemptResult(Outcome.WRITE_FAILED, _status(rd), message=f"{e}; {e.advice}, then {resume_hint(rd.path)}")


def _failed(rd: RunDir, e: Exception) -> AttemptResult:
    """The run raised: its traceback in error.log (named only when it could be written), status ``failed``."""
    where = f"traceback in {rd.path / ERROR_LOG}"
    try:
        rd.write_error_log(traceback.format_exc())
    except OSError as why:
        where = f"its traceback could not be saved: {type(why).__name__}: {why}"
    rd.set_status(Status.FAILED, f"{type(e).__name__}: {e}")
    return AttemptResult(Outcome.FAILED, _status(rd), message=f"{type(e).__name__}: {e} ({where})")


def _status(rd: RunDir) -> Status | None:
    """The run's status now, where this attempt started it (else it is not this attempt's to report)."""
    return Status.parse(rd.status()) if rd.started else None


def resume_command(run_dir: Path) -> str:
    """``fedrun resume=<run dir>``, pasteable: the directory absolute (it works from any folder), quoted for the
    shell where it needs it."""
    return f"fedrun {shlex.quote(f'resume={os.path.abspath(run_dir)}')}"


def sweep_resume_command(sweep_dir: Path, args: Sequence[str]) -> str:
    """The command that resumes a stopped sweep: its own arguments with the sweep's folder pinned, absolute (Hydra's
    default ``hydra.sweep.dir`` is dated, so the same command as typed would start a new sweep), quoted for the
    shell. Finished jobs are skipped and the stopped one resumes from its checkpoint (docs/sweeps.md)."""
    kept = [a for a in args if not a.lstrip("+").startswith("hydra.sweep.dir=")]
    return shlex.join(["fedrun", *kept, f"hydra.sweep.dir={os.path.abspath(sweep_dir)}"])


def resume_hint(run_dir: Path) -> str:
    """What to run next, for a run that stopped before its end: the exact command that continues it (re-running
    the command that started it would start a new run in a new dated directory, Hydra's default run dir)."""
    rd = RunDir(run_dir)
    if rd.checkpoint_file.is_file():
        return f"resume it with: {resume_command(run_dir)}"
    if rd.config_file.is_file():
        return f"no round had finished; run it from round 1 with: {resume_command(run_dir)}"
    return RUN_AFTER


def redraw_curves(rd: RunDir, spec: RunSpec) -> None:
    """Draw accuracy.png of a finished run that lacks it (a run made with ``output.plots=false``, or killed
    between its plot and its summary by an older fedrun)."""
    png, csv = rd.accuracy_plot, rd.metrics_file
    if spec.output.plots and not png.is_file() and csv.is_file():
        import pandas as pd

        from fedrun.storage.figures import plot_curves

        plot_curves(pd.read_csv(csv).to_dict("records"), png, f"{spec.algorithm.name} on {spec.data.name}")
