"""A sweep of Hydra's basic launcher with its stackable jobs trained together (docs/sweeps.md, "Stacked jobs"), and
its jobs run side by side on idle cores ("Jobs side by side").

fedrun/cli/hydra_patches.py routes the basic launcher's ``launch`` here. The sweep's jobs are composed as the basic
launcher composes them, validated, and fedrun/run/stacking.py decides which of them train together. Each job then runs
through Hydra's own ``run_job`` (its folder, its ``.hydra`` record, fedrun's callback and its attempt at the run),
the jobs of a stack in turns, each in a thread of its own, their cohorts trained as one (fedrun/engines/stacked.py).
Where the machine has idle cores (``hardware.parallel``), the stacks and the lone jobs run side by side, each in a
worker process of fedrun/cli/parallel_launch.py, which runs them as this module does. The console says which jobs
ran together, and why jobs that would have stacked did not. A sweep with nothing to stack and nothing to run side by
side (or with a job that does not compose) is handed back to the basic launcher whole: it runs as it always did.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import JobReturn, configure_log, run_job, setup_globals
from omegaconf import DictConfig, OmegaConf, open_dict

from fedrun.cli import compose_checks, hydra_patches, parallel_launch, sweeps
from fedrun.run.stacking import Candidate, StackPlan, candidate, memory_fit, plan_stacks, raise_ended, run_stacked


def launch(launcher: Any, job_overrides: Sequence[Sequence[str]], initial: int, basic: Callable[..., Any]) -> Any:
    """The basic launcher's ``launch`` (``basic``), with the stacks of fedrun/run/stacking.py: the jobs of a stack run
    together when the first of them comes, the others one after another; their returns in job order."""
    if len(job_overrides) < 2:
        return basic(launcher, job_overrides, initial)
    try:
        configs = [_compose(launcher, overrides, initial + i) for i, overrides in enumerate(job_overrides)]
    except Exception:  # noqa: BLE001 - Hydra reports it, after the jobs before it ran, as it always did
        return basic(launcher, job_overrides, initial)
    dirs = [_job_dir(cfg) for cfg in configs]
    jobs = [_candidate(initial + i, cfg, d) for i, (cfg, d) in enumerate(zip(configs, dirs, strict=True))]
    plan = plan_stacks(jobs, memory_fit)
    side = parallel_launch.side_by_side(launcher, jobs, plan, configs, dirs)
    if side is None and not plan.groups and not plan.why_not:
        for overrides, cfg in zip(job_overrides, configs, strict=True):  # the launcher runs them as composed here
            hydra_patches.keep_sweep_config(launcher.config, overrides, cfg)
        return basic(launcher, job_overrides, initial)
    setup_globals()
    configure_log(launcher.config.hydra.hydra_logging, launcher.config.hydra.verbose)
    Path(str(launcher.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
    _announce(plan if side is None else side.plan)
    if side is not None:
        return parallel_launch.run(side, configs, dirs, initial)
    runs: dict[int, JobReturn] = {}
    for i, cfg in enumerate(configs):
        num = initial + i
        if num in runs:
            continue
        group = plan.group_of(num)
        if group is None:
            runs[num] = run_one(launcher, cfg)
        else:
            names = [Path(dirs[n - initial] or "").name for n in group]
            for n, ret in zip(group, _run_group(launcher, [configs[n - initial] for n in group], names), strict=True):
                runs[n] = ret
        configure_log(launcher.config.hydra.hydra_logging, launcher.config.hydra.verbose)
    return [runs[initial + i] for i in range(len(configs))]


def _compose(launcher: Any, overrides: Sequence[str], num: int) -> DictConfig:
    """Job ``num``'s config, composed as the basic launcher composes it (the one the sweeper's validation composed:
    fedrun/cli/hydra_patches.py's :func:`~fedrun.cli.hydra_patches.compose_sweep_jobs_once`)."""
    cfg = launcher.hydra_context.config_loader.load_sweep_config(launcher.config, list(overrides))
    with open_dict(cfg):
        cfg.hydra.job.id = num
        cfg.hydra.job.num = num
    return cfg


def _job_dir(cfg: DictConfig) -> str | None:
    """The folder the job runs in (``hydra.sweep.dir``/``hydra.sweep.subdir``, resolved with it as Hydra's current
    config, as run_job resolves it); None when it does not resolve (the job's attempt says why)."""
    saved, readonly = HydraConfig.instance().cfg, OmegaConf.is_readonly(cfg.hydra)
    try:
        HydraConfig.instance().set_config(cfg)  # which makes cfg.hydra read-only: put back below, as composed
        sweep_dir = Path(str(OmegaConf.select(cfg, "hydra.sweep.dir")))
        return str(sweep_dir / str(OmegaConf.select(cfg, "hydra.sweep.subdir")))
    except Exception:  # noqa: BLE001
        return None
    finally:
        HydraConfig.instance().cfg = saved
        OmegaConf.set_readonly(cfg.hydra, True if readonly else None)


def _candidate(num: int, cfg: DictConfig, folder: str | None) -> Candidate:
    """Job ``num`` as the planner sees it (fedrun/run/stacking.py's :func:`candidate`), from its config less Hydra's
    node."""
    task = OmegaConf.masked_copy(cfg, [str(k) for k in cfg if k != "hydra"])
    return candidate(num, task, None if folder is None else Path(folder), compose_checks.command_imports())


def _announce(plan: StackPlan) -> None:
    """The console's lines of the sweep's stacks: which jobs train together, and why jobs that would have did not."""
    for group in plan.groups:
        sweeps.say_stacked(group)
    for nums, why in plan.why_not:
        sweeps.say_not_stacked(nums, why)


def run_one(launcher: Any, cfg: DictConfig) -> JobReturn:
    """One job, as the basic launcher runs it (``launcher``: its ``hydra_context`` and ``task_function``)."""
    return run_job(
        hydra_context=launcher.hydra_context,
        task_function=launcher.task_function,
        config=cfg,
        job_dir_key="hydra.sweep.dir",
        job_subdir_key="hydra.sweep.subdir",
    )


def _run_group(launcher: Any, cfgs: list[DictConfig], names: list[str]) -> list[JobReturn]:
    """A stack's jobs, each through ``run_job`` in its own thread, in turns (:func:`run_together`)."""
    return run_together([functools.partial(run_one, launcher, cfg) for cfg in cfgs], names)


def run_together(jobs: list[Callable[[], JobReturn]], names: list[str]) -> list[JobReturn]:
    """A stack's ``jobs`` (each one job's ``run_job``; ``names``: their folders), each in its own thread, in turns
    (fedrun/run/stacking.py's :func:`run_stacked`); an interrupt that stopped them stops the sweep (the first job's,
    naming it)."""
    saved = HydraConfig.instance().cfg
    try:
        ended = run_stacked(jobs, names)
    finally:
        HydraConfig.instance().cfg = saved
    raise_ended(ended)
    return [e.value for e in ended]
