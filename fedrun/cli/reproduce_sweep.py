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
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import yaml
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from fedrun.cli import compose_checks, hydra_patches
from fedrun.cli.main import CONF_DIR, error_line, execute, one_line
from fedrun.cli.sweeps import varying_keys, watching
from fedrun.report.sweep_console import SweepConsole
from fedrun.run.job_dirs import job_dir_name, override_key
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


def run_commands(commands: list[list[str]], log: bool = True) -> int:
    """Run the jobs of every ``fedrun -m`` argument list in ``commands``, printing one line per run as it ends
    (``log``; fedrun.log in each run dir has its rounds); the number of commands that failed to expand or compose
    (bad overrides: one line on stderr, like ``fedrun``'s exit code 2)."""
    failed = 0
    compose_checks.install()
    sweeps: list[tuple[Path, list[str], list[list[str]]]] = []
    for args in commands:
        sweep_dir, overrides = split_command(args)
        try:
            sweeps.append((sweep_dir, varying_keys(overrides), expand(overrides)))
        except Exception as e:  # noqa: BLE001 - a malformed override is bad input
            print(f"fedrun: error: {one_line(str(e))}", file=sys.stderr)
            failed += 1
    total = sum(len(jobs) for _, _, jobs in sweeps)
    console = SweepConsole(_common_root([d for d, _, _ in sweeps]), total, live=False, ends_only=True, quiet=not log)
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=CONF_DIR, version_base=None), watching(console):
            for sweep_dir, varying, jobs in sweeps:
                failed += not _run_sweep(sweep_dir, varying, jobs, console, log)
    finally:
        GlobalHydra.instance().clear()
    return failed


def _common_root(dirs: list[Path]) -> str:
    """The folder that holds every sweep of a reproduce target (its ``--out``)."""
    if not dirs:
        return "."
    return os.path.commonpath([str(d) for d in dirs]) if len(dirs) > 1 else str(dirs[0])


def _run_sweep(sweep_dir: Path, varying: list[str], jobs: list[list[str]], console: SweepConsole, log: bool) -> bool:
    for job in jobs:
        try:
            cfg = compose(config_name="config", overrides=job)
        except Exception as e:  # noqa: BLE001 - every composition error is bad input, as in fedrun.cli.main
            print(f"fedrun: error: {error_line(e)}", file=sys.stderr)
            return False
        run_dir = sweep_dir / job_dir_name(cfg, job, varying, sweep_dir)
        record_job(sweep_dir, run_dir.name, job)
        rd = RunDir(run_dir)
        rd.hydra_dir.mkdir(parents=True, exist_ok=True)
        atomic_write(rd.hydra_overrides_file, yaml.safe_dump(job, default_flow_style=False))
        atomic_write(rd.hydra_config_file, OmegaConf.to_yaml(cfg))
        tags = [o.partition("=")[2].strip("'\"") for o in job if override_key(o).startswith("tags.")]
        name = " ".join([*tags, run_dir.name])
        entry = console.job_started(len(console.jobs), name, OmegaConf.select(cfg, "fl.rounds"), run_dir)
        label = f"job {entry.num} [{run_dir.name}]"
        execute(cfg, run_dir, multirun=True, label=label, record=HYDRA_DIR)  # an interrupt stops all
        console.job_ended(entry, run_dir)
    return True
