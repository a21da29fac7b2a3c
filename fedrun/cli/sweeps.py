"""How Hydra runs a sweep for fedrun: the job directory resolver (``hydra.sweep.subdir``, named by
fedrun/run/job_dirs.py from the overrides that vary), the count of jobs that did not complete, and the Hydra
callback that shows a sweep's jobs (fedrun/report/sweep_console.py): a live table on a terminal, one line per job
start and end otherwise; jobs of a launcher that runs them in other processes (joblib, Slurm) print their end lines
there. The sweep's index file is fedrun/run/sweep_index.py's.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from fedrun.cli import hydra_patches
from fedrun.config.sections import capability_tags
from fedrun.core.errors import ConfigError
from fedrun.core.safe_yaml import load_yaml
from fedrun.report.sweep_console import Job, SweepConsole, table_command
from fedrun.run.job_dirs import job_dir_name, job_key
from fedrun.run.sweep_index import folder_counts, job_status
from fedrun.storage.lock import LOCK_FILE
from fedrun.storage.rundir import ERROR_FILE, HYDRA_DIR, HYDRA_RECORD_FILES
from fedrun.storage.status import Status

RESOLVER = "fedrun.job_dir"  # conf/config.yaml: hydra.sweep.subdir: ${fedrun.job_dir:}


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


def command_varying(config: DictConfig) -> list[str]:
    """The keys a sweep composed as ``config`` (the sweep's own, with its ``hydra`` node) varies: its command line's
    and its sweeper's ``params``."""
    params = OmegaConf.select(config, "hydra.sweeper.params")
    params = OmegaConf.to_container(params, resolve=False) if isinstance(params, DictConfig) else {}
    task = OmegaConf.select(config, "hydra.overrides.task", default=None)
    return varying_keys(list(task) if task is not None else [], params)  # type: ignore[arg-type]


def _job_dir(*, _root_: DictConfig) -> str:
    """Resolver of ``hydra.sweep.subdir``: Hydra resolves it in the job's process with the job's whole config."""
    task = OmegaConf.masked_copy(_root_, [str(k) for k in _root_ if k != "hydra"])
    overrides = OmegaConf.to_container(_root_.hydra.overrides.task, resolve=False)
    sweep_dir = Path(str(_root_.hydra.sweep.dir))
    return job_dir_name(task, overrides, sweep_varying(_root_), sweep_dir)  # type: ignore[arg-type]


def _join(*parts: Any) -> str:
    """``${fedrun.join:a,${x},b}``: the parts that are not null, joined with '-' (the Optuna study name)."""
    return "-".join(str(p) for p in parts if p is not None and str(p) != "")


def _run_name(*, _root_: DictConfig) -> str:
    """Resolver of ``hydra.run.dir``'s last part: the method and the data, each capability in play by its tag, then
    the short hash of the config a sweep's job folder ends with (``fedavg-fmnist-dp-fedavg-eps8-topk0.01-ef-3fa2c1d0``):
    what the run is, in its folder's name, and a folder of its own for each config started in the same second (runs
    launched side by side from a shell, ``fedrun seed=0 & fedrun seed=1 &``, shared one and all but the first were
    refused)."""
    raw = OmegaConf.to_container(OmegaConf.masked_copy(_root_, [str(k) for k in _root_ if k != "hydra"]), resolve=True)
    assert isinstance(raw, dict)
    task = {str(k): v for k, v in raw.items()}
    name = f"{_root_.algorithm.name}-{_root_.data.name}"
    try:
        key = [job_key(task)]
    except (TypeError, ValueError):  # a config that does not serialise: validation names what is wrong with it
        key = []
    return "-".join([name, *capability_tags(task), *key])


def register_resolvers() -> None:
    OmegaConf.register_new_resolver(RESOLVER, _job_dir, replace=True)
    OmegaConf.register_new_resolver("fedrun.run_name", _run_name, replace=True)
    OmegaConf.register_new_resolver("fedrun.join", _join, replace=True)


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
    varying: list[str] = []
    for r in jobs:
        run_dir = Path(r.hydra_cfg.hydra.runtime.output_dir)  # type: ignore[union-attr]  # set on every job
        sweep_dir = run_dir.parent
        with contextlib.suppress(Exception):  # the table's keys: from the sweep's command, as Hydra saved it
            varying = varying or sweep_varying(r.hydra_cfg)  # type: ignore[arg-type]
        status = Status.FAILED.value if r.status == JobStatus.FAILED else job_status(run_dir)
        status = Status.FAILED.value if status == "refused" else status
        if status != Status.COMPLETED:
            bad[status] = bad.get(status, 0) + 1
    if not bad:
        return 0
    kinds = ", ".join(f"{k}: {n}" for k, n in sorted(bad.items()))
    table = table_command(sweep_dir, varying)
    print(f"fedrun: {sum(bad.values())} of {len(jobs)} jobs failed ({kinds}); `{table}` lists them", file=sys.stderr)
    return 1


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


def say_stacked(nums: list[int]) -> None:
    """Jobs ``nums`` (0-based) of the sweep of this process train together, stacked: the console says so."""
    if _ACTIVE is not None:
        _ACTIVE.stacked(nums)


def say_not_stacked(nums: list[int], why: str) -> None:
    """Jobs ``nums`` (0-based) could have trained together but train alone: the console says why."""
    if _ACTIVE is not None:
        _ACTIVE.not_stacked(nums, why)


def active_console() -> SweepConsole | None:
    """The console of the sweep whose jobs run in this process (None: none): a sweep whose jobs run side by side in
    worker processes (fedrun/cli/parallel_launch.py) tells it how they start, go and end."""
    return _ACTIVE


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


# Hydra's record of a job (hydra.output_subdir) and what a refused attempt leaves beside it
REFUSED_LEFT = frozenset({HYDRA_DIR, ERROR_FILE, LOCK_FILE})
HYDRA_RECORD = frozenset(HYDRA_RECORD_FILES)
_NEW_RUN_DIR: list[tuple[Path, Path]] = []  # (the dated run dir, the topmost folder of it this command creates)


def note_new_run_dir(config: DictConfig) -> None:
    """Before Hydra makes a single run's directory: when it is a dated one (``hydra.run.dir`` with ``${now:...}``,
    fedrun's default ``outputs/<date>/<time>-<method>-<data>``) that does not exist yet, remember it and the topmost
    of its folders that this command creates, for :func:`remove_refused_run_dir`."""
    _NEW_RUN_DIR.clear()
    try:
        settings = OmegaConf.to_container(config.hydra.run, resolve=False)
        pattern = settings.get("dir") if isinstance(settings, dict) else None
        run_dir = Path(os.path.abspath(str(config.hydra.run.dir)))  # ${now:...} is cached: Hydra gets the same
    except Exception:  # noqa: BLE001 - no dated directory to remember; Hydra reports what is wrong
        return
    if "${now:" not in str(pattern) or os.path.lexists(run_dir):
        return
    top = run_dir
    while not os.path.lexists(top.parent) and top.parent != top:
        top = top.parent
    _NEW_RUN_DIR.append((run_dir, top))


def remove_refused_run_dir(run_dir: Path) -> None:
    """A refused single run (bad input) in a dated directory that this command created (:func:`note_new_run_dir`):
    remove it, and the folders above it that the command created, when they hold only what a refused attempt
    leaves (Hydra's record of the job, error.txt, the lock): a refused command leaves nothing named like a run.
    A directory named by the user (``hydra.run.dir=...``, ``resume=...``) or that existed before keeps its
    error.txt."""
    if not _NEW_RUN_DIR or _NEW_RUN_DIR[0][0] != Path(os.path.abspath(run_dir)):
        return
    run_dir, top = _NEW_RUN_DIR.pop()
    record = run_dir / HYDRA_DIR
    with contextlib.suppress(OSError):
        if not {p.name for p in run_dir.iterdir()} <= REFUSED_LEFT or run_dir.is_symlink():
            return
        if record.exists() and (record.is_symlink() or not {p.name for p in record.iterdir()} <= HYDRA_RECORD):
            return
        shutil.rmtree(run_dir)
        folder = run_dir.parent
        while folder != top.parent and not any(folder.iterdir()):  # the empty folders it made (outputs/<date>/)
            folder.rmdir()
            folder = folder.parent


class SweepCallback(Callback):
    """fedrun's Hydra callback (conf/config.yaml ``hydra.callbacks.fedrun_sweep``): a multirun prints its directory
    at the start and the end and shows its jobs (:class:`SweepConsole`). With the basic launcher the jobs run in
    this process and fill the live table (or lines); a launcher that runs them in other processes (joblib, Slurm)
    gets this object pickled, and each job prints its end line there."""

    def __init__(self) -> None:
        self.pid = 0  # the process of the sweep (set when it starts)
        self.sweep_dir = ""
        self.total: int | None = None
        self.jobs: dict[str, Job] = {}  # the running jobs by folder (a stack's jobs run at once, in turns)

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        note_new_run_dir(config)

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
            console.varying = command_varying(config)
            console.finish()
            close_console()
        else:  # the jobs ran elsewhere: how they ended, from their folders
            console = SweepConsole(self.sweep_dir, live=False)
            console.varying = command_varying(config)
            console.finish(folder_counts(Path(self.sweep_dir)))

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
        self.jobs[str(run_dir)] = _ACTIVE.job_started(int(config.hydra.job.num), run_dir.name, rounds, run_dir)

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        from hydra.core.utils import JobStatus

        run_dir = Path(config.hydra.runtime.output_dir)
        job = self.jobs.pop(str(run_dir), None)
        if _ACTIVE is None or job is None:
            return
        _ACTIVE.job_ended(job, run_dir, failed=job_return.status == JobStatus.FAILED)
