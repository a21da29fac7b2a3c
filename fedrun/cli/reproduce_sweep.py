"""Run ``fedrun -m`` commands in this process: the same jobs, order and run directories, one start-up.

A reproduce target is one ``fedrun -m`` per (preset, method). Started as subprocesses, each pays Python,
torch and Hydra start-up and loads its dataset again; for a ``-smoke`` target that dominates (80 processes
for FedIMA Table I). Here each command's overrides are expanded with Hydra's own BasicSweeper (cartesian
product in override order, so job ``n`` is the job ``fedrun -m`` numbers ``n``), each job's config is composed
with Hydra's compose API and run by :func:`fedrun.cli.main.execute` (one attempt: fedrun/run/attempt.py), into the
folder ``fedrun -m`` names it by (the overrides that vary, then the hash of its config, fedrun/run/job_dirs.py,
recorded in the sweep's ``index.yaml``) with ``.hydra/overrides.yaml`` and ``.hydra/config.yaml`` as Hydra writes
them (a rejected job keeps them, so fedrun-report can still label its cell). A failing job is recorded and the sweep
goes on; a finished run is skipped, an unfinished one resumes, as with ``fedrun -m``. Each run prints one line as it
ends (``[3/36] FedProx(0.1) fedcos_table2_fmnist_mlp partition.iid_fraction=0.3-1a2b3c4d: completed, acc 16.67%
(1.6 s)``: its method and preset tags, its folder); its rounds go to its fedrun.log only.

Jobs that stack train together, as in ``fedrun -m`` (fedrun/cli/stack_launch.py, docs/sweeps.md "Stacked jobs"):
every job of every command is composed first, fedrun/run/stacking.py's :func:`plan_stacks` groups the jobs of all the
commands that may train as one vectorised cohort (a method's settings x seeds, or jobs of several commands that
differ only in what stacks), the console says which jobs train together and why jobs that would have did not, and
each stack runs when its first job comes (:func:`run_stacked`: each job's attempt in its own thread, in turns),
each job into its own folder with its own records and end line, its summary.json's ``stack`` naming the others.
A job set to run alone (``hardware.stack=off``, an engine other than ``auto`` or ``vectorised``) is not looked at:
its command runs as it always did.
"""

from __future__ import annotations

import functools
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf

from fedrun.cli import compose_checks, hydra_patches
from fedrun.cli.main import CONF_DIR, error_line, execute, one_line
from fedrun.cli.sweeps import say_not_stacked, say_stacked, varying_keys, watching
from fedrun.config.schema import RunSpec
from fedrun.engines.stacked import alone
from fedrun.host.interrupts import interrupts
from fedrun.report.sweep_console import SweepConsole, job_numbers
from fedrun.run.attempt import SWEEP_AFTER
from fedrun.run.job_dirs import job_dir_name, override_key
from fedrun.run.stacking import (
    STACK_ENGINES,
    Candidate,
    StackPlan,
    candidate,
    memory_fit,
    plan_stacks,
    raise_ended,
    run_stacked,
)
from fedrun.run.sweep_index import record_job
from fedrun.storage.atomic import atomic_write
from fedrun.storage.rundir import HYDRA_DIR, RunDir


def split_command(args: list[str]) -> tuple[Path, list[str]]:
    """(hydra.sweep.dir, task overrides) of ``fedrun -m`` arguments (other ``hydra.*`` keys are dropped)."""
    sweep_dir = next((a.split("=", 1)[1] for a in args if a.startswith("hydra.sweep.dir=")), None)
    if sweep_dir is None:
        raise ValueError("hydra.sweep.dir is required to run a sweep in-process")
    return Path(sweep_dir), [a for a in args if a != "-m" and not a.lstrip("+~").startswith("hydra.")]


def expand(overrides: list[str]) -> list[list[str]]:
    """Each job's overrides, in the order Hydra's BasicSweeper launches them (its job numbers)."""
    parsed = OverridesParser.create().parse_overrides(overrides)
    return hydra_patches.sweep_jobs(parsed)


@dataclass
class Job:
    """A job of the commands, composed: its number (the console's, over every command), its sweep (folder and the
    keys its command varies), its overrides, its config and the folder it is planned to run in."""

    num: int
    sweep_dir: Path
    varying: list[str]
    overrides: list[str]
    cfg: DictConfig
    folder: Path
    spec: RunSpec | None = None  # its config validated, by the planner (its attempt does not validate it again)


def run_commands(
    commands: list[list[str]], log: bool = True, first: list[int] | None = None, total: int | None = None
) -> int:
    """Run the jobs of every ``fedrun -m`` argument list in ``commands``, those that stack together (module
    docstring), printing one line per run as it ends (``log``; fedrun.log in each run dir has its rounds); the
    number of commands that failed to expand or compose (bad overrides: one line on stderr, like ``fedrun``'s exit
    code 2; the command's jobs before the bad one run). ``first`` and ``total``: each command's first job number and
    the count of jobs in all, where these commands are some of a target's (fedrun/cli/reproduce_side.py: the
    console's ``[n/total]`` are the target's, and it says nothing before the jobs)."""
    failed = 0
    compose_checks.install()
    sweeps: list[tuple[Path, list[str], list[list[str]]]] = []
    starts: list[int] = []  # ``first`` of the commands that expand
    for i, args in enumerate(commands):
        sweep_dir, overrides = split_command(args)
        try:
            sweeps.append((sweep_dir, varying_keys(overrides), expand(overrides)))
            starts.extend(first[i : i + 1] if first is not None else [])
        except Exception as e:  # noqa: BLE001 - a malformed override is bad input
            print(f"fedrun: error: {one_line(str(e))}", file=sys.stderr)
            failed += 1
    count = sum(len(jobs) for _, _, jobs in sweeps) if total is None else total
    console = SweepConsole(common_root([d for d, _, _ in sweeps]), count, live=False, ends_only=True, quiet=not log)
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=CONF_DIR, version_base=None), watching(console, total is None):
            steps = _compose_all(sweeps, starts if first is not None else None)
            failed += sum(isinstance(step, str) for step in steps)
            _run_steps(steps, console)
    finally:
        GlobalHydra.instance().clear()
    return failed


def common_root(dirs: list[Path]) -> str:
    """The folder that holds every sweep of a reproduce target (its ``--out``)."""
    if not dirs:
        return "."
    return os.path.commonpath([str(d) for d in dirs]) if len(dirs) > 1 else str(dirs[0])


def _compose_all(sweeps: list[tuple[Path, list[str], list[list[str]]]], first: list[int] | None) -> list[Job | str]:
    """Each sweep's jobs composed, in order, numbered from 0 (or from each sweep's ``first``); a job that does not
    compose ends its sweep there, as the one line it prints when the sweep comes to it."""
    steps: list[Job | str] = []
    num = 0
    for i, (sweep_dir, varying, jobs) in enumerate(sweeps):
        num = num if first is None else first[i]
        for overrides in jobs:
            try:
                cfg = compose(config_name="config", overrides=overrides)
            except Exception as e:  # noqa: BLE001 - every composition error is bad input, as in fedrun.cli.main
                steps.append(f"fedrun: error: {error_line(e)}")
                break
            folder = sweep_dir / job_dir_name(cfg, overrides, varying, sweep_dir)
            steps.append(Job(num, sweep_dir, varying, overrides, cfg, folder))
            num += 1
    return steps


def _run_steps(steps: list[Job | str], console: SweepConsole) -> None:
    """The jobs in order, each stack's together when its first job comes; each composition error's line in its
    place."""
    jobs = {step.num: step for step in steps if isinstance(step, Job)}
    plan = plan_jobs(list(jobs.values()))
    for stack in plan.groups:
        say_stacked(stack)
    for nums, why in plan.why_not:
        say_not_stacked(nums, why)
    why_not = {num: why for nums, why in plan.why_not for num in nums}
    ran: set[int] = set()
    for step in steps:
        if isinstance(step, str):
            print(step, file=sys.stderr)
            continue
        if step.num in ran:
            continue
        group = plan.group_of(step.num)
        if group is not None:
            _run_stack([jobs[n] for n in group], console)
        elif step.num in why_not:  # its summary.json says why it ran alone, as its console line does
            with alone({"jobs": 1, "not_stacked": why_not[step.num]}):
                _run_job(step, console)
        else:
            _run_job(step, console)
        ran.update(group or [step.num])


def plan_jobs(jobs: list[Job]) -> StackPlan:
    """The stacks of ``jobs`` (fedrun/run/stacking.py's :func:`plan_stacks`, with the memory's bound), over every
    command. A job whose config as composed runs it alone, or whose folder an earlier job's is, is left out unread."""
    seen: set[Path] = set()
    found = []
    for job in jobs:
        if _alone_as_composed(job.cfg) or job.folder in seen:
            found.append(Candidate(job.num, None))
        else:
            found.append(candidate(job.num, job.cfg, job.folder, compose_checks.command_imports()))
            job.spec = found[-1].spec
        seen.add(job.folder)
    return plan_stacks(found, memory_fit)


def _alone_as_composed(cfg: DictConfig) -> bool:
    """Whether the job runs alone by its ``hardware`` as written (``hardware.stack=off``, YAML's bare ``off`` read
    as false included; an engine a stack does not train on): :func:`plan_stacks` leaves such a job out without a
    word, so it need not be validated here before its attempt validates it."""
    try:
        stack = str(OmegaConf.select(cfg, "hardware.stack", default="auto")).strip()
        engine = str(OmegaConf.select(cfg, "hardware.engine", default="auto")).strip()
    except Exception:  # noqa: BLE001 - validation says what is wrong
        return False
    return stack in ("off", "False", "false") or engine not in STACK_ENGINES


def _run_job(job: Job, console: SweepConsole) -> None:
    """One job's attempt, into the folder ``fedrun -m`` names it by (named again now: the jobs before it may have
    made folders), with Hydra's record of it, its console lines and the sweep's index."""
    sweep_dir, overrides = job.sweep_dir, job.overrides
    run_dir = sweep_dir / job_dir_name(job.cfg, overrides, job.varying, sweep_dir)
    record_job(sweep_dir, run_dir.name, overrides)
    rd = RunDir(run_dir)
    rd.hydra_dir.mkdir(parents=True, exist_ok=True)
    atomic_write(rd.hydra_overrides_file, yaml.safe_dump(overrides, default_flow_style=False))
    atomic_write(rd.hydra_config_file, OmegaConf.to_yaml(job.cfg))
    tags = [o.partition("=")[2].strip("'\"") for o in overrides if override_key(o).startswith("tags.")]
    name = " ".join([*tags, run_dir.name])
    entry = console.job_started(job.num, name, OmegaConf.select(job.cfg, "fl.rounds"), run_dir)
    label = f"job {entry.num} [{run_dir.name}]"
    execute(job.cfg, run_dir, multirun=True, label=label, record=HYDRA_DIR, spec=job.spec)  # an interrupt stops all
    console.job_ended(entry, run_dir)


def _run_stack(jobs: list[Job], console: SweepConsole) -> None:
    """A stack's jobs, each :func:`_run_job` in its own thread, in turns (:func:`run_stacked`); signals are routed
    here as in a lone job's attempt (the first stops every job at its next pause, each keeping its last round), and
    an interrupt that stopped them stops the sweep (the first job's, naming it)."""
    names = record_names([job.folder for job in jobs])
    with interrupts(f"jobs {job_numbers([job.num for job in jobs])}", SWEEP_AFTER):
        ended = run_stacked([functools.partial(_run_job, job, console) for job in jobs], names)
    raise_ended(ended)


def record_names(folders: list[Path]) -> list[str]:
    """A stack's jobs as each one's summary.json ``stack`` names the others: their folders' names when they are of
    one sweep (as ``fedrun -m`` names them), else their paths below the folder that holds their sweeps."""
    parents = {folder.parent for folder in folders}
    if len(parents) == 1:
        return [folder.name for folder in folders]
    root = os.path.commonpath([str(p) for p in parents])
    return [os.path.relpath(folder, root) for folder in folders]
