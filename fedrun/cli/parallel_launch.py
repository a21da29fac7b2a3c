"""A sweep's jobs side by side on idle cores (docs/sweeps.md, "Jobs side by side"; ``hardware.parallel``).

fedrun/cli/stack_launch.py plans a sweep of the basic launcher: its stacks (fedrun/run/stacking.py) and its lone
jobs. Where two or more of these units train and the machine has idle cores for them, they run side by side, each
in a worker process (fedrun/cli/parallel_worker.py), which runs its unit as the basic launcher does in this process:
Hydra's own ``run_job`` (the job's folder, its ``.hydra`` record, the callbacks, fedrun's attempt at the run), a
stack's jobs in turns. Processes, not threads: torch's global generator, its thread count, the loggers, Hydra's
current config and the working directory are per process, and a job's metrics are those of its run alone with the
same ``hardware.threads``.

The workers are this sweep's own (fedrun/cli/parallel_pool.py), started as the same Python with the same ``sys.path``
(the approach of Hydra's joblib launcher, which runs ``run_job`` in loky's processes; fedrun's contracts need more than
joblib gives, see docs/sweeps.md): each is sent the launcher's task and Hydra callbacks once, then one unit at a time
(each job's composed config, :func:`portable`), and tells this process, on a pipe of its own, when each job starts,
each evaluated round, and how each job ended (its ``JobReturn``). So the sweep's console (its live table or its lines)
is the basic launcher's; the workers' own output comes through this process, line by line. A signal to the sweep is
passed to every worker (they run in a process group of their own, so a Ctrl-C at the terminal reaches them once, from
here): each stops its job as a run stops (status ``interrupted``, its last checkpoint kept) and the command ends with
128 + the signal's number and one line naming the job, as a sweep in one process does; a second signal stops them at
once, as it stops a run. A worker whose sweep process died (SIGKILL) stops its job the same way.
"""

from __future__ import annotations

import heapq
import importlib
import inspect
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hydra.core.utils import JobReturn, JobRuntime
from omegaconf import DictConfig, OmegaConf

from fedrun.cli import sweeps
from fedrun.cli.parallel_pool import Pool
from fedrun.config.schema import RunSpec
from fedrun.host.memory import available_memory
from fedrun.host.threads import measured
from fedrun.run.stacking import MEMORY_SHARE, Candidate, StackPlan, job_bytes

# what a worker process holds of its own before any job's need: a tiny run's maximum RSS was 418 MB on this CPU
# (torch, Hydra, pandas imported; /usr/bin/time -v), its data and model a few MB of it
PROCESS_BYTES = 400 * 2**20
WORKER_THREADS = 1  # the torch threads of a worker's runs of hardware.threads=0: one idle core each


@dataclass
class SideBySide:
    """A sweep's units (job numbers: a stack's, or a lone job's, in job order) run in ``workers`` processes, chosen
    so ``why``; ``setup``: each worker's first message."""

    units: list[list[int]]
    workers: int
    why: str
    setup: bytes
    jobs: dict[int, dict[str, Any]]  # each job's config as a worker rebuilds it (:func:`portable`)
    plan: StackPlan  # the sweep's stacks as they run: the planner's, split for idle workers (:func:`split_units`)


def units_of(plan: StackPlan, nums: list[int]) -> list[list[int]]:
    """The sweep's units in job order: each stack of ``plan`` and each other job of ``nums`` alone."""
    units: list[list[int]] = []
    for num in nums:
        group = plan.group_of(num)
        if group is None:
            units.append([num])
        elif group[0] == num:
            units.append(list(group))
    return units


def split_units(units: list[list[int]], workers: int, trains: Callable[[int], bool]) -> list[list[int]]:
    """``units`` with stacks split in two (in job order, halving the jobs that train) while a split shortens the
    sweep: on a CPU a core of its own gains a job far more than training beside others does (docs/hardware.md,
    "Stacked sweeps"), so a stack should not leave a worker idle. The sweep's length is :func:`makespan`'s, each job
    that trains one unit of time; of the splits that shorten it most, the first in job order."""
    units = [list(u) for u in units]
    cost = lambda u: sum(map(trains, u))  # noqa: E731
    while True:
        best, chosen = makespan([cost(u) for u in units], workers), None
        for i, unit in enumerate(units):
            running = [n for n in unit if trains(n)]
            if len(running) < 2:
                continue
            cut = unit.index(running[(len(running) + 1) // 2])
            trial = [*units[:i], unit[:cut], unit[cut:], *units[i + 1 :]]
            if (length := makespan([cost(u) for u in trial], workers)) < best:
                best, chosen = length, trial
        if chosen is None:
            return units
        units = chosen


def makespan(costs: list[int], workers: int) -> int:
    """How long ``workers`` take over units of ``costs``, each taken in order by the first worker free (as
    fedrun/cli/parallel_pool.py hands them out)."""
    free = [0] * max(workers, 1)
    for c in costs:
        heapq.heapreplace(free, free[0] + c)
    return max(free)


def choose_workers(specs: list[RunSpec], unit_bytes: Callable[[], int]) -> tuple[int, str]:
    """How many processes the sweep of jobs ``specs`` runs in, and why: ``hardware.parallel`` (``off``: one, the
    sweep's own; ``N``: N, the smallest the jobs ask), or for ``auto``: where every job leaves its threads to fedrun
    (``hardware.threads=0``) and trains on the CPU without Ray, one per idle core, at most as many as
    :data:`MEMORY_SHARE` of the free memory holds of the largest unit (``unit_bytes()``, asked only then)."""
    asked = sorted((n, s.hardware.parallel) for s in specs if (n := s.hardware.parallel_workers) is not None)
    if asked:
        return asked[0][0], f"hardware.parallel={asked[0][1]}"
    if any(s.hardware.threads for s in specs):
        return 1, "hardware.threads pinned"
    if any(s.hardware.device != "cpu" or s.hardware.engine == "ray" for s in specs):
        return 1, "not on the CPU alone"
    cpu, free = measured(), available_memory()
    idle, held = int(cpu["threads"]), None if free is None else int(MEMORY_SHARE * free // max(unit_bytes(), 1))
    cores = f"{idle} of {cpu.get('cores', '?')} cores idle"
    return (idle, f"auto: {cores}") if held is None else (min(idle, held), f"auto: {cores}, memory for {held}")


def side_by_side(
    launcher: Any, jobs: list[Candidate], plan: StackPlan, configs: list[DictConfig], dirs: list[str | None]
) -> SideBySide | None:
    """The side-by-side run of a sweep of ``jobs`` (composed as ``configs``, in the folders ``dirs``), or None: it
    runs in this process, as before, because fewer than two units train (the others finished), the jobs chose so or
    the cores are busy (:func:`choose_workers`), two jobs share a folder (the second waits for the first), or the
    launcher's task, its callbacks or a job's config cannot be handed to another process as they are."""
    specs = [j.spec for j in jobs if j.spec is not None]
    if not specs or None in dirs or len(set(dirs)) < len(dirs):
        return None
    by_num = {j.num: j for j in jobs}
    trains = lambda n: by_num[n].alone != "finished"  # noqa: E731
    units = units_of(plan, [j.num for j in jobs])
    training = [u for u in units if any(map(trains, u))]
    if sum(sum(map(trains, u)) for u in training) < 2:
        return None
    workers, why = choose_workers(
        specs, lambda: max(PROCESS_BYTES + sum(_bytes(by_num[n].spec) for n in u) for u in training)
    )
    units = split_units(units, workers, trains)
    workers = min(workers, sum(any(map(trains, u)) for u in units))
    if workers < 2:
        return None
    setup, sent = _setup(launcher, workers, why), [portable(cfg) for cfg in configs]
    if setup is None or any(job is None for job in sent):
        return None
    split = StackPlan([u for u in units if len(u) > 1], plan.why_not)
    return SideBySide(units, workers, why, setup, {j.num: job for j, job in zip(jobs, sent, strict=True) if job}, split)


def portable(cfg: DictConfig) -> dict[str, Any] | None:
    """A job's composed config as a worker rebuilds it (:func:`rebuild`): Hydra's node as it is, the rest as plain
    containers (fedrun's schema classes are made at run time and cannot be pickled), and the resolvers' cache (the
    sweep's ``${now:}``); None unless the rebuilt config reads as the composed one, unresolved and resolved."""
    keys = [str(k) for k in cfg if k != "hydra"]
    try:
        job = {
            "hydra": OmegaConf.masked_copy(cfg, ["hydra"]),
            "task": OmegaConf.to_container(OmegaConf.masked_copy(cfg, keys), resolve=False),
            "cache": OmegaConf.get_cache(cfg),
        }
        again = rebuild(pickle.loads(pickle.dumps(job)))
    except Exception:  # noqa: BLE001 - not to be handed over: the sweep runs here
        return None
    same = OmegaConf.to_yaml(again) == OmegaConf.to_yaml(cfg)
    return job if same and all(_resolved(again, k) == _resolved(cfg, k) for k in keys) else None


def rebuild(job: dict[str, Any]) -> DictConfig:
    """The config :func:`portable` handed over."""
    cfg = OmegaConf.merge(job["hydra"], OmegaConf.create(job["task"]))
    assert isinstance(cfg, DictConfig)
    OmegaConf.set_cache(cfg, job["cache"])
    OmegaConf.set_struct(cfg, True)
    return cfg


def _resolved(cfg: DictConfig, key: str) -> Any:
    """The value of ``key`` with its interpolations resolved (what validation reads), or how resolving it failed."""
    try:
        node = cfg[key]
        return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node
    except Exception as e:  # noqa: BLE001 - compared, not raised
        return (type(e).__name__, str(e))


def _bytes(spec: RunSpec | None) -> int:
    return (job_bytes(spec) or 0) if spec is not None else 0


def _setup(launcher: Any, workers: int, why: str) -> bytes | None:
    """A worker's first message: how to find the launcher's task, its Hydra callbacks (``run_job`` needs no more of
    its Hydra context), Hydra's job name and logging, the torch threads of its runs of ``hardware.threads=0``, and
    what they record of the sweep (summary.json's ``parallel``); None when any of it cannot be pickled or found
    again in another process."""
    task = launcher.task_function
    where = (task.__module__, task.__qualname__)
    try:
        if inspect.unwrap(getattr(importlib.import_module(where[0]), where[1])) is not task:
            return None
        return pickle.dumps(
            {
                "task": where,
                "callbacks": launcher.hydra_context.callbacks,
                "name": JobRuntime.instance().get("name"),
                "logging": OmegaConf.to_container(launcher.config.hydra.hydra_logging, resolve=True),
                "verbose": _plain(launcher.config.hydra.verbose),
                "threads": WORKER_THREADS,
                "record": {"workers": workers, "selection": why},
                "sweep_dir": str(launcher.config.hydra.sweep.dir),
            }
        )
    except Exception:  # noqa: BLE001 - not to be handed over: the sweep runs here
        return None


def _plain(value: Any) -> Any:
    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


def run(side: SideBySide, configs: list[DictConfig], dirs: list[str | None], initial: int) -> list[JobReturn]:
    """Run the sweep's units side by side (module docstring); the jobs' returns in job order. A signal ends it with
    the :class:`Interrupted` that names the job it stopped in (fedrun/cli/main.py's one line)."""
    console = sweeps.active_console()
    if console is not None:
        console.side_by_side([n for u in side.units for n in u], side.workers, side.why)
    folders = {initial + i: (cfg, str(d)) for i, (cfg, d) in enumerate(zip(configs, dirs, strict=True))}
    pool = Pool(side.units, side.workers, side.setup, side.jobs, folders)
    try:
        returns = pool.serve()
    except KeyboardInterrupt as e:
        raise pool.stop(e) from None
    finally:
        pool.close()
    return [returns[initial + i] for i in range(len(configs))]
