"""Sweep job directories named by what varies and keyed by content, the sweep's index file, and how a multirun
shows itself and ended.

A job of ``fedrun -m`` runs in ``<hydra.sweep.dir>/<name>``: the overrides that vary across the sweep, then a
short hash of the part of its config that decides the results (:func:`fedrun.config.identity.config_key`), e.g.
``algorithm=fedprox,seed=1-3fa2c1d0``. The hash is the job's identity: a job finds its folder by it
(:func:`find_job_dir`), whatever the rest of the name says, so re-running a sweep with one more seed, method or
value runs only the new jobs (the finished ones are found and skipped, unfinished ones resume) although what
varies, and so the new names, changed; folders of older fedrun (the 12-hex hash alone) are found the same way.
One config never runs twice, however the command spells it. ``index.yaml`` in the sweep dir maps each job
directory to the overrides that last ran it.

While a sweep runs, :class:`SweepCallback` (a Hydra callback, conf/config.yaml) prints its directory at the start
and at the end (with the command that makes its table) and shows its jobs: a live table on a terminal, one line
per job start and end otherwise (CI, pipes, a log file); jobs of a launcher that runs them in other processes
(joblib, Slurm) print their end lines there.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shlex
import sys
import threading
import time
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from fedrun.cli import hydra_patches
from fedrun.core.errors import ConfigError
from fedrun.core.safe_yaml import load_yaml
from fedrun.storage.atomic import atomic_write
from fedrun.storage.lock import exclusive_lock
from fedrun.storage.rundir import ERROR_FILE, RunDir

INDEX_FILE = "index.yaml"
INDEX_LOCK = ".index.lock"  # parallel jobs of a joblib or SLURM sweep update the index
KEY_CHARS = 8  # hex digits of the config's SHA-256 in a job folder's name (a collision is checked, not assumed away)
LEGACY_KEY_CHARS = 12  # job folders of before readable names: the 12-hex hash alone
LABEL_CHARS = 100  # the readable part of a folder name at most (the name stays far below NAME_MAX, 255)
VALUE_CHARS = 40  # one override's ``key=value`` at most in that part
RESOLVER = "fedrun.job_dir"  # conf/config.yaml: hydra.sweep.subdir: ${fedrun.job_dir:}
RECORD = "fedrun_row"  # the ``extra`` key of the fedrun logger's round records (fedrun/run/recorder.py)
# characters kept as they are in a folder name; any other is %-escaped (its UTF-8 bytes), '/' included
SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-+=,[]()@")
ENDED = ("completed", "diverged")  # a job that starts in a folder with one of these is skipped (run.checkpoint)


def full_key(raw: dict[str, Any]) -> str:
    """The content key of a job whose resolved config is ``raw``: the hash of its result-deciding part."""
    from fedrun.config.identity import config_key  # torch: only where a job runs

    return config_key(raw)


def job_key(raw: dict[str, Any]) -> str:
    """The short hash that ends the folder name of a job whose resolved config is ``raw``."""
    return full_key(raw)[:KEY_CHARS]


def unresolvable_key(overrides: Iterable[str]) -> str:
    """The directory of a job whose config does not even resolve: keyed by its overrides (it gets error.txt)."""
    blob = json.dumps(list(overrides)).encode()
    return "unresolved-" + hashlib.sha256(blob).hexdigest()[:LEGACY_KEY_CHARS]


def _escape(text: str) -> str:
    """``text`` with every character outside :data:`SAFE` %-escaped (so no ``/``, no space, no shell quote)."""
    return "".join(c if c in SAFE else "".join(f"%{b:02X}" for b in c.encode()) for c in text)


def _cut(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters ending in ``...`` when longer, never inside a %-escape."""
    if len(text) <= limit:
        return text
    head = text[: limit - 3]
    pct = head.rfind("%", len(head) - 2)
    return (head[:pct] if pct >= 0 else head) + "..."


def override_key(line: str) -> str:
    """The key of a ``key=value`` override line, without Hydra's ``+``/``++``/``~`` prefixes."""
    return line.partition("=")[0].lstrip("+~")


def job_label(overrides: Iterable[str], varying: Collection[str]) -> str:
    """The readable part of a job's folder name: its overrides whose key is in ``varying``, in the command's
    order, as ``key=value`` joined by ``,``; quotes dropped, odd characters escaped, each and all cut to length."""
    parts = []
    for line in overrides:
        key, _, value = line.partition("=")
        key = key.lstrip("+~")
        if key not in varying or line.startswith("~"):
            continue
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        parts.append(_cut(_escape(f"{key}={value}"), VALUE_CHARS))
    label = _cut(",".join(parts), LABEL_CHARS)
    return "%2E" + label[1:] if label.startswith(".") else label  # never a hidden folder


def folder_name(label: str, key: str) -> str:
    """``<label>-<key>``, or the key alone when nothing varies."""
    return f"{label}-{key}" if label else key


def _hash_part(name: str) -> str:
    return name.rsplit("-", 1)[-1]


def _saved_key(run_dir: Path) -> str | None:
    """The content key of the run whose config.yaml is in ``run_dir``; None when it has none (a job refused before
    it started) or one that does not read."""
    from fedrun.config.identity import saved_config_key

    rd = RunDir(run_dir)
    if not rd.config_file.is_file():
        return None
    try:
        cfg = load_yaml(rd.config_file.read_text(), str(rd.config_file), plain=True)
    except (OSError, ConfigError):
        return None
    return saved_config_key(cfg) if isinstance(cfg, dict) else None


def find_job_dir(sweep_dir: Path, key: str) -> str | None:
    """The folder of ``sweep_dir`` that holds the job of content key ``key`` (the full hash), whatever its readable
    part: one whose name ends in a prefix of the key of at least :data:`KEY_CHARS` hex digits (the 12-hex names of
    older fedrun included), and whose config.yaml, when it has one, has that key. None when there is none."""
    try:
        names = sorted(os.listdir(sweep_dir))
    except OSError:
        return None
    for name in names:
        part = _hash_part(name)
        if len(part) < KEY_CHARS or not key.startswith(part.lower()) or not (sweep_dir / name).is_dir():
            continue
        saved = _saved_key(sweep_dir / name)
        if saved is None or saved == key:
            return name
    return None


def new_folder_name(sweep_dir: Path | None, label: str, key: str) -> str:
    """A name for a new job folder: ``<label>-<key[:8]>``, or with 4 more hex digits at a time while another
    config's folder ends in the same short hash (a collision is checked, not assumed away)."""
    taken = {_hash_part(name).lower() for name in _listdir(sweep_dir)} if sweep_dir is not None else set()
    n = KEY_CHARS
    while key[:n] in taken and n < len(key):
        n += 4
    return folder_name(label, key[:n])


def _listdir(folder: Path) -> list[str]:
    try:
        return os.listdir(folder)
    except OSError:
        return []


def job_dir_name(
    task: DictConfig, overrides: Iterable[str], varying: Collection[str] = (), sweep_dir: Path | None = None
) -> str:
    """The directory name of the job composed as ``task`` (no ``hydra`` node) from ``overrides``, in a sweep where
    the keys ``varying`` take more than one value: the folder of ``sweep_dir`` that already holds this config
    (:func:`find_job_dir`), else a new name (the varying overrides, then the short hash)."""
    overrides = list(overrides)
    try:
        key = full_key(OmegaConf.to_container(task, resolve=True))  # type: ignore[arg-type]
    except Exception:  # noqa: BLE001 - validation names the bad field in this job's error.txt
        return unresolvable_key(overrides)
    found = find_job_dir(sweep_dir, key) if sweep_dir is not None else None
    return found or new_folder_name(sweep_dir, job_label(overrides, varying), key)


def varying_keys(overrides: Iterable[str], params: dict[str, Any] | None = None) -> list[str]:
    """The keys that take more than one value in a sweep of ``overrides`` (``seed=0,1``, ``range(3)``, ``glob``)
    and of a sweeper's ``params`` (Optuna's search space, the basic sweeper's ``hydra.sweeper.params``), in order."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    keys: list[str] = []
    for line in [f"{k}={v}" for k, v in (params or {}).items()] + [str(o) for o in overrides]:
        try:
            (o,) = parser.parse_overrides([line])
        except Exception:  # noqa: BLE001 - Hydra refuses it in its own words
            continue
        if o.is_sweep_override() and o.key_or_group not in keys:
            keys.append(o.key_or_group)
    return keys


def sweep_varying(root: DictConfig) -> list[str]:
    """The varying keys of the sweep a job composed as ``root`` (with its ``hydra`` node) belongs to: from the
    sweep's command as Hydra saved it in ``<sweep dir>/multirun.yaml`` (the basic sweeper writes it before any
    job starts) and the sweeper's ``params``."""
    params = OmegaConf.select(root, "hydra.sweeper.params")
    params = OmegaConf.to_container(params, resolve=False) if isinstance(params, DictConfig) else {}
    command: list[str] = []
    if hydra_patches.is_basic_sweeper(OmegaConf.select(root, "hydra.sweeper._target_")):
        saved = Path(str(root.hydra.sweep.dir)) / "multirun.yaml"
        try:
            multirun = load_yaml(saved.read_text(), str(saved), plain=True)
            command = [str(o) for o in multirun["hydra"]["overrides"]["task"]]
        except (OSError, ConfigError, KeyError, TypeError):
            command = []
    return varying_keys(command, params)  # type: ignore[arg-type]


def _job_dir(*, _root_: DictConfig) -> str:
    """Resolver of ``hydra.sweep.subdir``: Hydra resolves it in the job's process with the job's whole config."""
    task = OmegaConf.masked_copy(_root_, [str(k) for k in _root_ if k != "hydra"])
    overrides = OmegaConf.to_container(_root_.hydra.overrides.task, resolve=False)
    sweep_dir = Path(str(_root_.hydra.sweep.dir))
    return job_dir_name(task, overrides, sweep_varying(_root_), sweep_dir)  # type: ignore[arg-type]


def _join(*parts: Any) -> str:
    """``${fedrun.join:a,${x},b}``: the parts that are not null, joined with '-' (the Optuna study name)."""
    return "-".join(str(p) for p in parts if p is not None and str(p) != "")


def register_resolvers() -> None:
    OmegaConf.register_new_resolver(RESOLVER, _job_dir, replace=True)
    OmegaConf.register_new_resolver("fedrun.join", _join, replace=True)


def read_index(sweep_dir: Path) -> dict[str, str]:
    """``index.yaml``: job directory -> the overrides that last ran it (empty when missing or unreadable)."""
    try:
        data = load_yaml((sweep_dir / INDEX_FILE).read_text(), str(sweep_dir / INDEX_FILE), plain=True)
    except (OSError, ConfigError):  # ConfigError: malformed YAML or a YAML bomb (safe_yaml)
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def record_job(sweep_dir: Path, job_dir: str, overrides: list[str]) -> None:
    """Add or update ``job_dir``'s line in the sweep's ``index.yaml``."""
    sweep_dir.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(sweep_dir / INDEX_LOCK):
        index = read_index(sweep_dir)
        index[job_dir] = " ".join(overrides)
        head = "# fedrun sweep: job directory (what varies, then a hash of its config) -> the overrides that ran it\n"
        atomic_write(sweep_dir / INDEX_FILE, head + yaml.safe_dump(index, sort_keys=False, width=1 << 20))


def job_status(run_dir: Path) -> str:
    """How a job ended, from its run dir: summary.json's status, ``refused`` (bad input: error.txt, no summary),
    or ``failed``."""
    status = RunDir(run_dir).status()
    if status is None and (run_dir / ERROR_FILE).is_file():
        return "refused"
    return status or "failed"


def report_multirun(returns: Any) -> int:
    """After a sweep of Hydra's basic sweeper (its list of job returns): one line saying how many of its
    jobs did not complete, and the exit code (0 when all completed, else 1)."""
    from hydra.core.utils import JobReturn, JobStatus

    flat = [r for batch in returns for r in (batch if isinstance(batch, list | tuple) else [batch])]
    jobs = [r for r in flat if isinstance(r, JobReturn)]
    if not jobs:
        return 0
    bad: dict[str, int] = {}
    sweep_dir: Path | str = "."  # every job's parent: set by the loop (jobs is not empty)
    for r in jobs:
        run_dir = Path(r.hydra_cfg.hydra.runtime.output_dir)  # type: ignore[union-attr]  # set on every job
        sweep_dir = run_dir.parent
        status = "failed" if r.status == JobStatus.FAILED else job_status(run_dir)
        status = "failed" if status == "refused" else status
        if status != "completed":
            bad[status] = bad.get(status, 0) + 1
    if not bad:
        return 0
    kinds = ", ".join(f"{k}: {n}" for k, n in sorted(bad.items()))
    print(
        f"fedrun: {sum(bad.values())} of {len(jobs)} jobs failed ({kinds}); `{table_command(sweep_dir)}` lists them",
        file=sys.stderr,
    )
    return 1


def find_jobs(sweep_dir: Path, *overrides: str) -> list[Path]:
    """The job directories of ``sweep_dir`` whose overrides (index.yaml) include every one of ``overrides``."""
    return [sweep_dir / name for name, line in read_index(sweep_dir).items() if set(overrides) <= set(line.split(" "))]


def table_command(sweep_dir: Path | str) -> str:
    """The command that prints a sweep's table, ready to paste."""
    return f"fedrun-report table {shlex.quote(str(sweep_dir))}"


@dataclass
class Job:
    """One job as the sweep's console shows it."""

    num: int
    name: str
    rounds: int | None = None
    status: str = "running"
    round: int = 0
    acc: float | None = None  # the last evaluated round's test accuracy; once ended, the run's last-k mean
    started: float = 0.0
    seconds: float | None = None


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
        self.console = console or Console(highlight=False)
        self.live_mode = self.console.is_interactive if live is None else live
        self.jobs: list[Job] = []
        self.lock = threading.Lock()
        self.live: Any = None
        self.handler = _RoundHandler(self)
        self.streams: list[tuple[logging.StreamHandler[Any], Any]] = []

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
        self._say(f"sweep done ({ended}): {self.sweep_dir}; its table: {table_command(self.sweep_dir)}")

    def counts(self) -> dict[str, int]:
        """How many of this sweep's jobs ended how (``skipped``: found done), in a fixed order."""
        out: dict[str, int] = {}
        for job in self.jobs:
            out[job.status] = out.get(job.status, 0) + 1
        order = ("completed", "skipped", "diverged", "failed", "refused", "interrupted", "running")
        return {k: out[k] for k in sorted(out, key=lambda k: order.index(k) if k in order else len(order))}

    # -- its jobs
    def job_started(self, num: int, name: str, rounds: int | None, run_dir: Path | None = None) -> Job:
        """A job starts (``run_dir``: its folder, which tells a finished job that will be skipped)."""
        before = RunDir(run_dir).status() if run_dir is not None else None
        job = Job(num, name, rounds, "skipping" if before in ENDED else "running", started=time.monotonic())
        with self.lock:
            self.jobs.append(job)
        if not self.live_mode and not self.ends_only and job.status == "running":
            self._say(f"{self._tag(job)} {name}: started")
        return job

    def job_ended(self, job: Job, run_dir: Path | None, failed: bool = False) -> None:
        """A job ended: its status and accuracy from its folder (``failed``: it raised past fedrun)."""
        status = "failed" if failed or run_dir is None else job_status(run_dir)
        summary = RunDir(run_dir).summary() if run_dir is not None and not failed else None
        with self.lock:
            skipped = job.status == "skipping"
            job.status = "skipped" if skipped and status in ENDED else status
            job.acc = summary.fields.get("test_acc_last_k") if summary is not None else None
            job.seconds = None if skipped else time.monotonic() - job.started
            if summary is not None and isinstance(summary.fields.get("rounds_completed"), int):
                job.round = summary.fields["rounds_completed"]
        if not self.live_mode:
            self._say(self.line(job))

    def line(self, job: Job) -> str:
        """A job's end line: ``[3/4] algorithm=fedprox,seed=0-3fa2c1d0: completed, acc 81.20% (12.5 s)``."""
        acc = "" if job.acc is None else f", acc {100 * job.acc:.2f}%"
        if job.status == "skipped":
            return f"{self._tag(job)} {job.name}: skipped (already done{acc})"
        took = "" if job.seconds is None else f" ({job.seconds:.1f} s)"
        return f"{self._tag(job)} {job.name}: {job.status}{acc}{took}"

    def round_done(self, row: dict[str, Any]) -> None:
        with self.lock:
            running = [j for j in self.jobs if j.status == "running"]
            if running:
                running[-1].round = int(row.get("round", running[-1].round))
                if isinstance(row.get("test_acc"), float | int):
                    running[-1].acc = float(row["test_acc"])

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
        shown = [j for j in jobs if j.status in ("running", "skipping")]
        shown = sorted(shown + [j for j in jobs if j not in shown][-(self.ROWS - len(shown)) :], key=lambda j: j.num)
        if len(jobs) > len(shown):
            t.add_row("", Text(f"... {len(jobs) - len(shown)} earlier jobs"), "", "", "", "")
        now = time.monotonic()
        for j in shown:
            rounds = f"{j.round}/{j.rounds}" if j.rounds else str(j.round or "")
            acc = "" if j.acc is None else f"{100 * j.acc:.2f}%"
            secs = j.seconds if j.seconds is not None else (now - j.started if j.status == "running" else None)
            style = {"completed": "green", "skipped": "dim", "running": "bold"}.get(j.status, "red")
            took = "" if secs is None else f"{secs:.0f} s"
            t.add_row(str(j.num + 1), Text(j.name), Text(j.status, style=style), rounds, acc, took)
        return t


class _RoundHandler(logging.Handler):
    """Passes the ``fedrun`` logger's round records to a :class:`SweepConsole`."""

    def __init__(self, console: SweepConsole) -> None:
        super().__init__(logging.INFO)
        self.sweep = console

    def emit(self, record: logging.LogRecord) -> None:
        row = getattr(record, RECORD, None)
        if isinstance(row, dict):
            self.sweep.round_done(row)


_ACTIVE: SweepConsole | None = None  # the console of the sweep whose jobs run in this process


def reporting() -> bool:
    """Whether a sweep's console reports the jobs of this process (their skip and end lines are its)."""
    return _ACTIVE is not None


def round_echo(label: str) -> str | None:
    """The label a job's log lines are echoed to stderr with (fedrun/run/recorder.py's ``run_log``): none where
    the sweep's console shows the job (its table or lines say how it goes; fedrun.log has every line), the label
    where the job runs in a launcher's own process (joblib, Slurm: that process's log shows its rounds)."""
    return None if _ACTIVE is not None and _ACTIVE.local else label


@contextlib.contextmanager
def watching(console: SweepConsole, announce: bool = True) -> Iterator[SweepConsole]:
    """For the ``with`` block: ``console`` shows the sweep whose jobs run in this process."""
    global _ACTIVE
    _ACTIVE = console
    console.start(announce)
    try:
        yield console
    finally:
        close_console()


def close_console() -> None:
    """Stop the sweep console of this process, if any (an interrupted sweep, an error between jobs): the live table
    leaves the terminal as it was last drawn, before the line that says how the command ended."""
    global _ACTIVE
    console, _ACTIVE = _ACTIVE, None
    if console is not None:
        with contextlib.suppress(Exception):
            console.stop()


def planned_jobs(config: DictConfig) -> int | None:
    """How many jobs the multirun composed as ``config`` launches: the basic sweeper's cartesian product, Optuna's
    ``n_trials``; None when not known."""
    sweeper = OmegaConf.select(config, "hydra.sweeper._target_")
    if not hydra_patches.is_basic_sweeper(sweeper):
        trials = OmegaConf.select(config, "hydra.sweeper.n_trials")
        return trials if isinstance(trials, int) else None
    from hydra.core.override_parser.overrides_parser import OverridesParser

    params = OmegaConf.select(config, "hydra.sweeper.params")
    space = OmegaConf.to_container(params) if isinstance(params, DictConfig) else {}
    lines = [f"{k!s}={v}" for k, v in (space.items() if isinstance(space, dict) else [])]
    try:
        parsed = OverridesParser.create().parse_overrides([*lines, *config.hydra.overrides.task])
        return len(hydra_patches.sweep_jobs(parsed))
    except Exception:  # noqa: BLE001 - Hydra reports a bad override itself
        return None


class SweepCallback(Callback):
    """fedrun's Hydra callback (conf/config.yaml ``hydra.callbacks.fedrun_sweep``): a multirun prints its directory
    at the start and the end and shows its jobs (:class:`SweepConsole`). With the basic launcher the jobs run in
    this process and fill the live table (or lines); a launcher that runs them in other processes (joblib, Slurm)
    gets this object pickled, and each job prints its end line there."""

    def __init__(self) -> None:
        self.pid = 0  # the process of the sweep (set when it starts)
        self.sweep_dir = ""
        self.total: int | None = None
        self.job: Job | None = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        global _ACTIVE
        self.pid = os.getpid()
        self.sweep_dir = str(config.hydra.sweep.dir)
        self.total = planned_jobs(config)
        in_process = hydra_patches.is_basic_launcher(OmegaConf.select(config, "hydra.launcher._target_"))
        console = SweepConsole(self.sweep_dir, self.total, live=None if in_process else False)
        if in_process:
            _ACTIVE = console
            console.start()
        else:
            console.start()
            console.stop()

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        console = _ACTIVE
        if console is not None:
            console.finish()
            close_console()
        else:  # the jobs ran elsewhere: how they ended, from their folders
            SweepConsole(self.sweep_dir, live=False).finish(folder_counts(Path(self.sweep_dir)))

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        global _ACTIVE
        if not self.pid:  # a single run
            return
        if os.getpid() != self.pid and _ACTIVE is None:  # a launcher's own process: end lines only
            _ACTIVE = SweepConsole(self.sweep_dir, self.total, live=False, ends_only=True, local=False)
        if _ACTIVE is None:
            return
        run_dir = Path(config.hydra.runtime.output_dir)
        rounds = OmegaConf.select(config, "fl.rounds", default=None)
        self.job = _ACTIVE.job_started(int(config.hydra.job.num), run_dir.name, rounds, run_dir)

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        from hydra.core.utils import JobStatus

        if _ACTIVE is None or self.job is None:
            return
        run_dir = Path(config.hydra.runtime.output_dir)
        _ACTIVE.job_ended(self.job, run_dir, failed=job_return.status == JobStatus.FAILED)
        self.job = None


def folder_counts(sweep_dir: Path) -> dict[str, int]:
    """How the jobs recorded in a sweep's index.yaml ended, from their folders."""
    out: dict[str, int] = {}
    for name in read_index(sweep_dir):
        if (sweep_dir / name).is_dir():
            status = job_status(sweep_dir / name)
            out[status] = out.get(status, 0) + 1
    return out
